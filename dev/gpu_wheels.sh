# Sourced by record_gpu.sh and gpu_tier.sh from the course root: on a GPU machine without the course's extra
# packages (Jupyter, nbval, bitsandbytes, optimum-quanto), installs the wheels in .gpu-wheels/
# (../shared/gpu/fetch-wheels.sh) into /tmp/site and puts them on PYTHONPATH. The folder travels to the machine
# only when it is carried (it is git-ignored); without it the tests that need those packages fail or skip.
# Leave huggingface_hub out of the folder (the packages' dependencies pull it in): the machine's transformers needs
# its own version (< 2), and optimum-quanto, imported by tests/test_marlin.py, imports transformers.
if [ -d .gpu-wheels ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    .gpu-wheels/*.whl || return 1
  export PYTHONPATH=/tmp/site
  python3 -m ipykernel install --user --name python3 >/dev/null || return 1
else
  echo "[gpu] no .gpu-wheels/ here (carry it): Jupyter, nbval, bitsandbytes and optimum-quanto are missing" >&2
fi
