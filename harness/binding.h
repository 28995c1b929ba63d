// The interface between a kernel file's binding and the course's binding runtime.
//
// harness/build.py compiles every kernel file with torch's load_inline: the file is the CUDA source, and a C++
// binding it generates from the file's EXPORT declarations is the C++ source. That binding includes only this
// header and Python's, so it compiles in a fraction of a second: torch's headers cost several seconds in every
// file that includes them, even from a precompiled header. What needs them (reading a torch.Tensor, checking it,
// torch's current stream and device) lives in harness/binding.cpp, the binding runtime, built once per
// torch and Python with load_inline too. A binding finds the runtime's functions through a capsule.
#ifndef COURSE_BINDING_H
#define COURSE_BINDING_H
#include <Python.h>

#define COURSE_STR2(x) #x
#define COURSE_STR(x) COURSE_STR2(x)
#define COURSE_CAT2(a, b) a##b
#define COURSE_CAT(a, b) COURSE_CAT2(a, b)

#define COURSE_BINDING_VERSION 1
#define COURSE_BINDING_CAPSULE "course_binding._C_API"
#define COURSE_MAX_PARAMS 32

typedef union {
    void* p;
    long long i;
    double f;
} course_value;

typedef struct {
    const char* name;    // as declared in the kernel file
    char kind;           // 'p' a pointer (a torch tensor), 'i' an integer, 'f' a float or double, 's' the stream
    const char* dtype;   // 'p': the torch dtype the pointer's type stands for ("float32"), or 0 for void* (any)
    int writes;          // 'p': not const, so the kernel may write through it
    int bits;            // 'i': 32 or 64
    int is_unsigned;     // 'i': values below 0 are refused
    int code;            // 'p': the dtype's c10::ScalarType, filled in by the runtime (-1: any)
} course_param;

typedef struct {
    const char* name;      // the launcher
    int nargs;             // arguments taken from Python (every parameter but a trailing stream)
    int has_stream;        // 1: the last parameter is a cudaStream_t, passed torch's current stream
    course_param* params;  // nargs of them
    int min_cc;            // compute capability the file requires, as 10 * major + minor (80: sm_80)
    int exact;             // 1: built for min_cc's own features (sm_90a): runs on that capability only
    void (*launch)(const course_value* args);  // calls the launcher with args[0 .. nargs - 1 + has_stream]
} course_launcher;

typedef struct {
    int version;  // COURSE_BINDING_VERSION
    // Resolves a launcher's dtype names; 0, or -1 with a Python error set.
    int (*prepare)(course_launcher* launcher);
    // Checks the arguments, launches on torch's current stream of the tensors' device, checks the launch, and
    // returns None (with COURSE_SYNC set: the stream, as an int, for the caller to wait on). Arguments it refuses
    // raise course_binding.Refused (harness.build then says why, in words); a failed launch raises RuntimeError
    // naming the CUDA error.
    PyObject* (*call)(course_launcher* launcher, PyObject* const* args, Py_ssize_t nargs);
} course_api;

#endif  // COURSE_BINDING_H
