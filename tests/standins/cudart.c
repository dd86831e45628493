/* STAND-IN for the CUDA runtime (libcudart), for tritonize's tests only: there is no GPU behind it.
 *
 * "Device" memory is host memory from malloc. What it enforces is the part of the CUDA runtime API's
 * contract (docs.nvidia.com/cuda/cuda-runtime-api, modules "Memory Management", "Stream Management",
 * "Device Management") that the code above it relies on, and it fails where a real GPU would
 * misbehave, not only where it would refuse:
 * - every allocation is registered; cudaFree of anything not allocated (or freed twice) is an error;
 * - cudaMemcpy/cudaMemcpyAsync check the direction they are given: a device side must lie inside one
 *   live allocation, a host side must not (a host pointer passed as device memory is what crashes on a
 *   GPU); cudaMemcpyAsync needs a live stream (or 0, the legacy default stream);
 * - streams are registered like allocations;
 * - one device (0) with the compute capability in $TRITONIZE_EMULATED_GPU_CC (default 8.6).
 * Errors return the runtime's codes (cudaErrorInvalidValue = 1, cudaErrorInvalidDevice = 101,
 * cudaErrorInvalidResourceHandle = 400) and print one line saying why to stderr.
 *
 * The emulated `tensorrt` asks it, through the emu_cuda_* functions (which no real libcudart has),
 * whether the addresses it is given are live device memory. At exit, when $TRITONIZE_EMULATED_CUDA_REPORT
 * names a file, one line is appended to it: "<pid> <live allocations> <live bytes> <live streams> <errors>".
 * Built by tests/emulation (cc -shared -fPIC) into a temporary directory. Built with
 * -DEMU_DEVICE_COUNT_ERROR=<code>, it is a runtime that cannot reach the GPU: cudaGetDeviceCount answers that
 * code and 0 devices, and every other call the code, as a CUDA 13 runtime under a driver older than R580 answers
 * 35 (cudaErrorInsufficientDriver, driver_types.h).
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { cudaSuccess = 0, cudaErrorInvalidValue = 1, cudaErrorMemoryAllocation = 2, cudaErrorInsufficientDriver = 35,
       cudaErrorNoDevice = 100, cudaErrorInvalidDevice = 101, cudaErrorInvalidResourceHandle = 400 };
enum { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3, Default = 4 };

typedef struct { char *ptr; size_t size; } Allocation;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static Allocation *allocations;
static size_t allocation_count, allocation_capacity;
static void **streams;
static size_t stream_count, stream_capacity;
static int errors;
static int last_error;
static char violation[512];

/* A runtime the driver refuses answers every call with that code, as the real one does. */
#ifdef EMU_DEVICE_COUNT_ERROR
#define REFUSED_BY_DRIVER() return EMU_DEVICE_COUNT_ERROR
#else
#define REFUSED_BY_DRIVER() (void)0
#endif

static int fail(int code, const char *fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(violation, sizeof violation, fmt, args);
    va_end(args);
    fprintf(stderr, "emulated CUDA runtime: %s\n", violation);
    errors++;
    last_error = code;
    return code;
}

/* The allocation holding [p, p + n), or -1. Called with the lock held. */
static long find_range(const void *p, size_t n) {
    const char *c = p;
    for (size_t i = 0; i < allocation_count; i++) {
        Allocation *a = &allocations[i];
        if (c >= a->ptr && c + n <= a->ptr + (a->size ? a->size : 1) && c + n >= c) return (long)i;
    }
    return -1;
}

/* Whether p points anywhere inside a live allocation. */
static int inside_any(const void *p) { return find_range(p, 1) >= 0; }

static long find_stream(const void *s) {
    for (size_t i = 0; i < stream_count; i++)
        if (streams[i] == s) return (long)i;
    return -1;
}

int cudaMalloc(void **p, size_t size) {
    REFUSED_BY_DRIVER();
    if (!p) return cudaErrorInvalidValue;
    pthread_mutex_lock(&lock);
    char *ptr = malloc(size ? size : 1);
    if (!ptr) { pthread_mutex_unlock(&lock); return cudaErrorMemoryAllocation; }
    if (allocation_count == allocation_capacity) {
        allocation_capacity = allocation_capacity ? 2 * allocation_capacity : 64;
        allocations = realloc(allocations, allocation_capacity * sizeof *allocations);
    }
    allocations[allocation_count++] = (Allocation){ptr, size};
    *p = ptr;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

int cudaFree(void *p) {
    REFUSED_BY_DRIVER();
    if (!p) return cudaSuccess; /* documented: freeing 0 does nothing */
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < allocation_count; i++) {
        if (allocations[i].ptr == p) {
            free(p);
            allocations[i] = allocations[--allocation_count];
            pthread_mutex_unlock(&lock);
            return cudaSuccess;
        }
    }
    int code = fail(cudaErrorInvalidValue, "cudaFree(%p): not a live device allocation (freed twice, or host memory)", p);
    pthread_mutex_unlock(&lock);
    return code;
}

static int copy(const char *call, void *dst, const void *src, size_t n, int kind) {
    pthread_mutex_lock(&lock);
    int dst_device = find_range(dst, n) >= 0, src_device = find_range(src, n) >= 0;
    int code = cudaSuccess;
    switch (kind) {
    case HostToDevice:
        if (!dst_device) code = fail(cudaErrorInvalidValue, "%s HostToDevice: destination %p + %zu bytes is not inside one device allocation", call, dst, n);
        else if (inside_any(src)) code = fail(cudaErrorInvalidValue, "%s HostToDevice: source %p is device memory", call, src);
        break;
    case DeviceToHost:
        if (!src_device) code = fail(cudaErrorInvalidValue, "%s DeviceToHost: source %p + %zu bytes is not inside one device allocation", call, src, n);
        else if (inside_any(dst)) code = fail(cudaErrorInvalidValue, "%s DeviceToHost: destination %p is device memory", call, dst);
        break;
    case DeviceToDevice:
        if (!src_device || !dst_device)
            code = fail(cudaErrorInvalidValue, "%s DeviceToDevice: %p or %p is not device memory of that size", call, dst, src);
        break;
    case HostToHost:
        if (inside_any(dst) || inside_any(src))
            code = fail(cudaErrorInvalidValue, "%s HostToHost: %p or %p is device memory", call, dst, src);
        break;
    case Default:
        break;
    default:
        code = fail(cudaErrorInvalidValue, "%s: unknown cudaMemcpyKind %d", call, kind);
    }
    if (code == cudaSuccess && n) memmove(dst, src, n);
    pthread_mutex_unlock(&lock);
    return code;
}

int cudaMemcpy(void *dst, const void *src, size_t n, int kind) {
    REFUSED_BY_DRIVER();
    return copy("cudaMemcpy", dst, src, n, kind);
}

int cudaMemcpyAsync(void *dst, const void *src, size_t n, int kind, void *stream) {
    REFUSED_BY_DRIVER();
    pthread_mutex_lock(&lock);
    int live = stream == NULL || find_stream(stream) >= 0;
    int code = live ? cudaSuccess
                    : fail(cudaErrorInvalidResourceHandle, "cudaMemcpyAsync: stream %p is not a live stream", stream);
    pthread_mutex_unlock(&lock);
    return code ? code : copy("cudaMemcpyAsync", dst, src, n, kind);
}

int cudaStreamCreate(void **stream) {
    REFUSED_BY_DRIVER();
    if (!stream) return cudaErrorInvalidValue;
    pthread_mutex_lock(&lock);
    if (stream_count == stream_capacity) {
        stream_capacity = stream_capacity ? 2 * stream_capacity : 16;
        streams = realloc(streams, stream_capacity * sizeof *streams);
    }
    void *s = malloc(1);
    streams[stream_count++] = s;
    *stream = s;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

int cudaStreamSynchronize(void *stream) {
    REFUSED_BY_DRIVER();
    pthread_mutex_lock(&lock);
    int code = stream == NULL || find_stream(stream) >= 0
                   ? cudaSuccess
                   : fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize(%p): not a live stream", stream);
    pthread_mutex_unlock(&lock);
    return code;
}

int cudaStreamDestroy(void *stream) {
    REFUSED_BY_DRIVER();
    pthread_mutex_lock(&lock);
    long i = find_stream(stream);
    int code = cudaSuccess;
    if (i < 0) {
        code = fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy(%p): not a live stream", stream);
    } else {
        free(streams[i]);
        streams[i] = streams[--stream_count];
    }
    pthread_mutex_unlock(&lock);
    return code;
}

int cudaGetDeviceCount(int *count) {
    if (!count) return cudaErrorInvalidValue;
#ifdef EMU_DEVICE_COUNT_ERROR
    *count = 0;
    return EMU_DEVICE_COUNT_ERROR;
#else
    *count = 1;
    return cudaSuccess;
#endif
}

int cudaSetDevice(int device) {
    REFUSED_BY_DRIVER();
    return device == 0 ? cudaSuccess
                       : fail(cudaErrorInvalidDevice, "cudaSetDevice(%d): the emulated machine has one device, 0", device);
}

int cudaGetDevice(int *device) {
    REFUSED_BY_DRIVER();
    if (!device) return cudaErrorInvalidValue;
    *device = 0;
    return cudaSuccess;
}

static void capability(int *major, int *minor) {
    const char *cc = getenv("TRITONIZE_EMULATED_GPU_CC");
    *major = 8;
    *minor = 6;
    if (cc) sscanf(cc, "%d.%d", major, minor);
}

/* cudaDevAttrComputeCapabilityMajor = 75, cudaDevAttrComputeCapabilityMinor = 76 (driver_types.h). */
int cudaDeviceGetAttribute(int *value, int attribute, int device) {
    REFUSED_BY_DRIVER();
    if (!value || device != 0) return cudaErrorInvalidValue;
    int major, minor;
    capability(&major, &minor);
    if (attribute == 75) *value = major;
    else if (attribute == 76) *value = minor;
    else return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: attribute %d is not emulated", attribute);
    return cudaSuccess;
}

/* cudaDeviceProp starts with `char name[256]` in every CUDA version; only the name is filled in. */
int cudaGetDeviceProperties(void *prop, int device) {
    REFUSED_BY_DRIVER();
    if (!prop || device != 0) return cudaErrorInvalidValue;
    int major, minor;
    capability(&major, &minor);
    snprintf((char *)prop, 256, "Emulated GPU (tritonize tests, sm_%d%d)", major, minor);
    return cudaSuccess;
}

int cudaGetLastError(void) {
    int code = last_error;
    last_error = cudaSuccess;
    return code;
}

const char *cudaGetErrorString(int code) { return code ? violation : "no error"; }

/* The enum names of driver_types.h for the codes this stand-in returns. */
const char *cudaGetErrorName(int code) {
    switch (code) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    default: return "cudaErrorUnknown";
    }
}

/* ---- the emulation's own questions (no real libcudart has these) ---- */

/* 1 when [p, p + n) lies inside one live allocation. */
int emu_cuda_is_device_range(const void *p, size_t n) {
    pthread_mutex_lock(&lock);
    int found = find_range(p, n) >= 0;
    pthread_mutex_unlock(&lock);
    return found;
}

int emu_cuda_is_stream(const void *stream) {
    pthread_mutex_lock(&lock);
    int found = stream == NULL || find_stream(stream) >= 0;
    pthread_mutex_unlock(&lock);
    return found;
}

/* Live allocations (and their bytes in *bytes), live streams in *live_streams, errors so far. */
size_t emu_cuda_live(size_t *bytes, size_t *live_streams, int *error_count) {
    pthread_mutex_lock(&lock);
    size_t total = 0;
    for (size_t i = 0; i < allocation_count; i++) total += allocations[i].size;
    if (bytes) *bytes = total;
    if (live_streams) *live_streams = stream_count;
    if (error_count) *error_count = errors;
    size_t count = allocation_count;
    pthread_mutex_unlock(&lock);
    return count;
}

const char *emu_cuda_last_violation(void) { return violation; }

__attribute__((destructor)) static void report(void) {
    const char *path = getenv("TRITONIZE_EMULATED_CUDA_REPORT");
    if (!path) return;
    FILE *f = fopen(path, "a");
    if (!f) return;
    size_t bytes = 0;
    fprintf(f, "%d %zu %zu %zu %d\n", (int)getpid(), emu_cuda_live(&bytes, NULL, NULL), bytes, stream_count, errors);
    fclose(f);
}
