/* gmjit.h: libgmjit's C API (plain C99), for bindings (Python's ctypes, Rust, Julia) and for C
 * programs. It covers what an application does with the library: open a runtime on a device,
 * launch, resolve or tune a catalog kernel by name, describe the catalog, register a kernel of
 * one's own, compile a configuration to a directory.
 *
 * Conventions
 * - Every function but gmjit_api_version, gmjit_version, gmjit_last_error and gmjit_free returns
 *   a gmjit_status; GMJIT_OK is 0. On failure gmjit_last_error() gives the one-line reason. It is
 *   per thread, and every call that returns a status sets it: "" after a success.
 * - No C++ exception crosses this boundary, and a null handle, null string or null output
 *   pointer where one is required is GMJIT_ERROR_USAGE, never a crash.
 * - A problem shape is `count` keys and values (`keys[i]` = `values[i]`); a configuration the
 *   same. A dtype of NULL or "" is the kernel's first dtype.
 * - Text results (JSON) are returned through `char** out` as NUL-terminated strings the caller
 *   owns and frees with gmjit_free; on failure *out is set to NULL.
 * - Tensors are device addresses (CUdeviceptr, a framework's data_ptr()) as uint64_t, in the
 *   kernel's tensor order: inputs, then outputs (gmjit_describe gives names, roles, dtypes and
 *   element counts). A stream is a CUstream / cudaStream_t as void*; NULL is the default stream.
 *
 * Compatibility. GMJIT_API_VERSION counts changes to this header. Within one major version of
 * the library (the shared object's soname, libgmjit.so.0) a later version only adds: functions
 * keep their names and signatures, enumerators their values, and JSON results may gain fields
 * but keep the ones they have. A program compiled against version N runs against a library that
 * reports gmjit_api_version() >= N. */
#ifndef GMJIT_GMJIT_H
#define GMJIT_GMJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GMJIT_API_VERSION 2

#if defined(__GNUC__)
#define GMJIT_C_API __attribute__((visibility("default")))
#else
#define GMJIT_C_API
#endif

typedef enum gmjit_status {
  GMJIT_OK = 0,
  GMJIT_ERROR_USAGE = 1,         /* bad input: unknown kernel, dtype or key, wrong tensor count, null */
  GMJIT_ERROR_DRIVER = 2,        /* a CUDA Driver API call failed, or there is no driver or device */
  GMJIT_ERROR_NVRTC = 3,         /* an NVRTC or nvJitLink call itself failed */
  GMJIT_ERROR_COMPILE = 4,       /* a kernel failed to compile */
  GMJIT_ERROR_DEVICE_LIMIT = 5,  /* a configuration exceeds what the device offers */
  GMJIT_ERROR_LAUNCH = 6,        /* a launch or the kernel's execution failed */
  GMJIT_ERROR_CACHE = 7,         /* the cache file */
  GMJIT_ERROR_CACHE_MISS = 8,    /* no winner cached, under GMJIT_MISS_FAIL */
  GMJIT_ERROR_OUT_OF_MEMORY = 9, /* host memory */
  GMJIT_ERROR_INTERNAL = 10      /* anything else; the reason says what */
} gmjit_status;

/* What a launch does when the cache holds no winner for its problem (gmjit::MissPolicy). */
typedef enum gmjit_miss_policy {
  GMJIT_MISS_NEAREST = 0,        /* the nearest tuned shape's winner, else the default configuration */
  GMJIT_MISS_TUNE = 1,           /* tune now and record the winner in the cache */
  GMJIT_MISS_DEFAULT_CONFIG = 2, /* the template's default configuration */
  GMJIT_MISS_FAIL = 3            /* GMJIT_ERROR_CACHE_MISS */
} gmjit_miss_policy;

/* A gmjit::Runtime: one device, one cache file, the modules and workspaces it loaded. Calls on
 * one runtime may come from several threads at once. */
typedef struct gmjit_runtime gmjit_runtime;

/* GMJIT_API_VERSION of the library that is loaded. */
GMJIT_C_API int gmjit_api_version(void);
/* The library's version, "major.minor.patch". */
GMJIT_C_API const char* gmjit_version(void);
/* The reason the latest call of this thread failed, "" if it succeeded. Valid until this thread's
 * next call. */
GMJIT_C_API const char* gmjit_last_error(void);
/* Frees a string this API returned; NULL is allowed. */
GMJIT_C_API void gmjit_free(char* text);

/* Opens a runtime on CUDA device `device`, reading `cache_path` (NULL or "": $GMJIT_CACHE, else
 * the default path), following `miss_policy` on a cache miss. Touches neither the device nor the
 * cache: that happens at the first launch or resolve. */
GMJIT_C_API gmjit_status gmjit_runtime_open(int device, const char* cache_path, gmjit_miss_policy miss_policy,
                                            gmjit_runtime** out);
/* Closes a runtime once its launches have completed (it does not synchronize). */
GMJIT_C_API gmjit_status gmjit_runtime_close(gmjit_runtime* runtime);

/* Launches the tuned `kernel` for the shape on `stream` and returns without synchronizing
 * (gmjit::Runtime::launch). Workspaces are the runtime's. */
GMJIT_C_API gmjit_status gmjit_launch(gmjit_runtime* runtime, const char* kernel, const char* dtype,
                                      const char* const* shape_keys, const int64_t* shape_values, size_t shape_count,
                                      const uint64_t* tensors, size_t tensor_count, void* stream);

/* The configuration a launch would use and why, as JSON: {"kernel", "dtype", "shape", "config",
 * "source" ("cache", "nearest", "default_config", "tuned"), "nearest_shape", "note"}. */
GMJIT_C_API gmjit_status gmjit_resolve(gmjit_runtime* runtime, const char* kernel, const char* dtype,
                                       const char* const* shape_keys, const int64_t* shape_values,
                                       size_t shape_count, char** json_out);

/* Tunes one problem on the runtime's device and records trials and winner in its cache, as
 * `gmtune tune` does. `strategy` NULL or "": "model"; `max_evaluations` 0 and `max_seconds` 0:
 * no limit. The report, as `gmtune tune --json` prints it, goes to *json_out. */
GMJIT_C_API gmjit_status gmjit_tune(gmjit_runtime* runtime, const char* kernel, const char* dtype,
                                    const char* const* shape_keys, const int64_t* shape_values, size_t shape_count,
                                    const char* strategy, size_t max_evaluations, double max_seconds,
                                    char** json_out);

/* The catalog as `gmtune list --json` prints it: {"kernels": [...]}. */
GMJIT_C_API gmjit_status gmjit_list_kernels(char** json_out);

/* One kernel as JSON: its entry of gmjit_list_kernels (problem keys, data keys, parameters and
 * domains, tensors with name, role, dtype and element-count expression). With a shape
 * (shape_count > 0) it also holds "problem" (the normalized dtype and shape) and, for each
 * tensor, "count" (elements at that shape) and "resolved_dtype". */
GMJIT_C_API gmjit_status gmjit_describe(const char* kernel, const char* dtype, const char* const* shape_keys,
                                        const int64_t* shape_values, size_t shape_count, char** json_out);

/* Registers a kernel of your own from its manifest (JSON text) and .cuh source (README.md,
 * "Bringing your own kernels"); its name goes to *name_out (may be NULL). */
GMJIT_C_API gmjit_status gmjit_register_kernel(const char* manifest_json, const char* cuh_source, char** name_out);
/* The same from a manifest file, whose "header_file" is read relative to it. */
GMJIT_C_API gmjit_status gmjit_register_kernel_file(const char* manifest_path, char** name_out);

/* Registers a kernel generated from an expression (README.md, "Expressions"), e.g.
 * "y = silu(a) * b", whose undeclared inputs take `dtype` (NULL: fp32); `name` NULL or "" names
 * it expr_ and a hash of the text. Its problem keys are rows and cols; it then launches, resolves
 * and tunes by name like any catalog kernel. Its name goes to *name_out (may be NULL). Since
 * GMJIT_API_VERSION 2. */
GMJIT_C_API gmjit_status gmjit_register_expression(const char* name, const char* expression, const char* dtype,
                                                   char** name_out);

/* Compiles one configuration (parameters not given take their defaults) for `arch` (NULL or "":
 * device 0's; "sm_90a" needs no GPU). With `out_dir`, writes what `gmtune compile --out` writes
 * there (.cu .ptx .cubin .log resources.json, and .sass where nvdisasm or cuobjdump is
 * installed). The resource report and identity (resources.json) go to *json_out (may be NULL). */
GMJIT_C_API gmjit_status gmjit_compile(const char* kernel, const char* dtype, const char* const* shape_keys,
                                       const int64_t* shape_values, size_t shape_count,
                                       const char* const* config_keys, const int64_t* config_values,
                                       size_t config_count, const char* arch, const char* out_dir, char** json_out);

#ifdef __cplusplus
}
#endif

#endif /* GMJIT_GMJIT_H */
