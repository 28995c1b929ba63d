"""The GPU kernel course harness: build, check, benchmark, roofline, Nsight, exercises, results."""
