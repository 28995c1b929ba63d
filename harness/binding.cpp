// The binding runtime: what every kernel file's binding needs from torch, compiled once (harness/binding.h says why).
//
// call() takes a launcher's Python arguments, checks each against its C declaration (a const float* must be a
// contiguous float32 CUDA tensor, all on one device; a pointer the kernel writes must not be an expanded view; an
// int must be a Python int that fits its C type), makes the tensors' device current, passes torch's current stream
// on it, launches, and checks the launch. With COURSE_SYNC set it returns the stream, and the Python side waits for
// the kernel (polling it, so that a hang is reported) and raises the error it left.
//
// It does not word its refusals: any argument it refuses raises course_binding.Refused, and the Python side
// (harness/build.py, KernelFunction) runs its own checks to say which argument is wrong and why. The messages live
// in one place, and the call that passes its checks pays for none of them.
#include <torch/csrc/autograd/python_variable.h>
#include <ATen/MemoryOverlap.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "binding.h"

namespace {

PyObject* refused = nullptr;  // course_binding.Refused

PyObject* refuse() {
    PyErr_SetNone(refused);
    return nullptr;
}

int dtype_code(const char* name) {
    static const struct { const char* name; c10::ScalarType type; } table[] = {
        {"float32", c10::ScalarType::Float}, {"float64", c10::ScalarType::Double},
        {"float16", c10::ScalarType::Half},  {"bfloat16", c10::ScalarType::BFloat16},
        {"int8", c10::ScalarType::Char},     {"uint8", c10::ScalarType::Byte},
        {"int16", c10::ScalarType::Short},   {"int32", c10::ScalarType::Int},
        {"int64", c10::ScalarType::Long},
    };
    for (const auto& t : table)
        if (std::strcmp(t.name, name) == 0) return static_cast<int>(t.type);
    return -2;
}

int prepare(course_launcher* launcher) {
    if (launcher->nargs + launcher->has_stream > COURSE_MAX_PARAMS) {
        PyErr_Format(PyExc_ValueError, "%s: more than %d parameters", launcher->name, COURSE_MAX_PARAMS);
        return -1;
    }
    for (int i = 0; i < launcher->nargs; ++i) {
        course_param& p = launcher->params[i];
        p.code = -1;
        if (p.kind == 'p' && p.dtype) {
            p.code = dtype_code(p.dtype);
            if (p.code == -2) {
                PyErr_Format(PyExc_ValueError, "%s: unknown dtype %s", launcher->name, p.dtype);
                return -1;
            }
        }
    }
    return 0;
}

// Compute capability (10 * major + minor) per device, read once.
int capability(int device) {
    static int known[256] = {0};
    if (device < 0 || device >= 256) return 0;
    if (!known[device]) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
        known[device] = 10 * major + minor;
    }
    return known[device];
}

bool sync_requested() {
    const char* s = std::getenv("COURSE_SYNC");
    return s && *s && std::strcmp(s, "0") != 0;
}

PyObject* call(course_launcher* L, PyObject* const* args, Py_ssize_t nargs) {
    try {
        if (nargs != L->nargs) return refuse();
        course_value v[COURSE_MAX_PARAMS];
        int device = -1;
        for (int i = 0; i < L->nargs; ++i) {
            const course_param& p = L->params[i];
            PyObject* a = args[i];
            if (p.kind == 'p') {
                if (!THPVariable_Check(a)) return refuse();
                const at::Tensor& t = THPVariable_Unpack(a);
                if (p.code >= 0 && static_cast<int>(t.scalar_type()) != p.code) return refuse();
                if (!t.is_contiguous() || !t.is_cuda()) return refuse();
                const int d = t.get_device();
                if (device < 0) device = d;
                else if (d != device) return refuse();
                if (p.writes && t.numel() > 0 && at::has_internal_overlap(t) == at::MemOverlap::Yes) return refuse();
                v[i].p = p.writes ? t.mutable_data_ptr() : const_cast<void*>(t.const_data_ptr());
            } else if (p.kind == 'i') {
                if (!PyLong_Check(a) || PyBool_Check(a)) return refuse();
                int overflow = 0;
                const long long x = PyLong_AsLongLongAndOverflow(a, &overflow);
                if (overflow || (x == -1 && PyErr_Occurred())) {
                    PyErr_Clear();
                    return refuse();
                }
                const long long lo = p.is_unsigned ? 0 : (p.bits == 64 ? LLONG_MIN : -(1LL << 31));
                if (x < lo || (p.bits == 32 && x >= (1LL << 31))) return refuse();
                v[i].i = x;
            } else {  // 'f'
                if (!PyFloat_Check(a) && !PyLong_Check(a)) return refuse();
                const double x = PyFloat_AsDouble(a);
                if (x == -1.0 && PyErr_Occurred()) {
                    PyErr_Clear();
                    return refuse();
                }
                v[i].f = x;
            }
        }
        if (c10::cuda::device_count() == 0) return refuse();  // no GPU: the Python side says so
        if (device < 0) device = c10::cuda::current_device();
        const int cc = capability(device);
        if (L->exact ? cc != L->min_cc : cc < L->min_cc) return refuse();
        c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
        if (L->has_stream) v[L->nargs].p = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
        L->launch(v);
        const cudaError_t e = cudaGetLastError();  // the launch's own error (a bad configuration) comes back at once
        if (e != cudaSuccess) {
            PyErr_Format(PyExc_RuntimeError, "%s: CUDA error %s: %s", L->name, cudaGetErrorName(e), cudaGetErrorString(e));
            return nullptr;
        }
        // COURSE_SYNC: the caller waits for the kernel (polling, so that a hang is reported): it gets the stream
        if (sync_requested()) return PyLong_FromVoidPtr(L->has_stream ? v[L->nargs].p : nullptr);
        Py_RETURN_NONE;
    } catch (const std::exception& e) {
        if (!PyErr_Occurred()) PyErr_Format(PyExc_RuntimeError, "%s: %s", L->name, e.what());
        return nullptr;
    }
}

const course_api api = {COURSE_BINDING_VERSION, prepare, call};

PyObject* error_name(PyObject*, PyObject* arg) {  // cudaGetErrorName, for tests: the runtime needs no GPU to answer
    const long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return nullptr;
    return PyUnicode_FromString(cudaGetErrorName(static_cast<cudaError_t>(code)));
}

PyObject* error_string(PyObject*, PyObject* arg) {
    const long code = PyLong_AsLong(arg);
    if (code == -1 && PyErr_Occurred()) return nullptr;
    return PyUnicode_FromString(cudaGetErrorString(static_cast<cudaError_t>(code)));
}

PyObject* stream_query(PyObject*, PyObject* arg) {  // cudaStreamQuery: 600 (cudaErrorNotReady) while work runs
    void* s = PyLong_AsVoidPtr(arg);
    if (!s && PyErr_Occurred()) return nullptr;
    cudaError_t e;
    Py_BEGIN_ALLOW_THREADS
    e = cudaStreamQuery(static_cast<cudaStream_t>(s));
    Py_END_ALLOW_THREADS
    if (e == cudaErrorNotReady) cudaGetLastError();  // not an error: leave none behind
    return PyLong_FromLong(static_cast<long>(e));
}

PyObject* stream_sync(PyObject*, PyObject* arg) {  // the error the stream's work left, once it is done (0: none)
    void* s = PyLong_AsVoidPtr(arg);
    if (!s && PyErr_Occurred()) return nullptr;
    cudaError_t e;
    Py_BEGIN_ALLOW_THREADS
    e = cudaStreamSynchronize(static_cast<cudaStream_t>(s));
    if (e == cudaSuccess) e = cudaGetLastError();
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(static_cast<long>(e));
}

PyMethodDef methods[] = {
    {"error_name", error_name, METH_O, "cudaGetErrorName(code)"},
    {"error_string", error_string, METH_O, "cudaGetErrorString(code)"},
    {"stream_query", stream_query, METH_O, "cudaStreamQuery(stream handle)"},
    {"stream_sync", stream_sync, METH_O, "cudaStreamSynchronize(stream handle), then cudaGetLastError"},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module = {PyModuleDef_HEAD_INIT, COURSE_STR(TORCH_EXTENSION_NAME),
                      "The course's binding runtime (harness/binding.cpp)", -1, methods};

}  // namespace

PyMODINIT_FUNC COURSE_CAT(PyInit_, TORCH_EXTENSION_NAME)(void) {
    PyObject* m = PyModule_Create(&module);
    if (!m) return nullptr;
    refused = PyErr_NewExceptionWithDoc("course_binding.Refused",
                                        "The binding refused a launcher's arguments (harness.build says why).",
                                        nullptr, nullptr);
    PyObject* capsule = PyCapsule_New(const_cast<course_api*>(&api), COURSE_BINDING_CAPSULE, nullptr);
    if (!refused || !capsule || PyModule_AddObject(m, "Refused", refused) < 0 ||
        PyModule_AddObject(m, "_C_API", capsule) < 0) {
        Py_XDECREF(capsule);
        Py_DECREF(m);
        return nullptr;
    }
    Py_INCREF(refused);  // PyModule_AddObject took one reference; `refused` keeps its own
    return m;
}
