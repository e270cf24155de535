#include "core/backends/cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

#include "absl/strings/str_cat.h"

#ifndef ROPE_CUBLAS_SONAME
#error "ROPE_CUBLAS_SONAME must name the cuBLAS shared library (e.g. libcublas.so.13)"
#endif
#ifndef ROPE_CUBLAS_FALLBACK_PATH
#error "ROPE_CUBLAS_FALLBACK_PATH must name where the toolkit's cuBLAS was at build time"
#endif

namespace rope {
namespace {

template <typename F>
bool Resolve(void* library, const char* name, F* out, std::string* missing) {
  *out = reinterpret_cast<F>(dlsym(library, name));
  if (*out == nullptr) absl::StrAppend(missing, missing->empty() ? "" : ", ", name);
  return *out != nullptr;
}

absl::StatusOr<const CublasApi*> Load() {
  // The loader's search (LD_LIBRARY_PATH, ld.so.cache) first, then the
  // toolkit that built this binary.
  void* library = dlopen(ROPE_CUBLAS_SONAME, RTLD_NOW | RTLD_LOCAL);
  std::string errors;
  if (library == nullptr) {
    errors = dlerror();
    library = dlopen(ROPE_CUBLAS_FALLBACK_PATH, RTLD_NOW | RTLD_LOCAL);
  }
  if (library == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot load cuBLAS (", ROPE_CUBLAS_SONAME, "): ", errors, "; ", dlerror(),
        ": install the CUDA toolkit's cuBLAS or add its directory to LD_LIBRARY_PATH"));
  }
  auto* api = new CublasApi;  // lives for the process, like the library
  std::string missing;
  Resolve(library, "cublasCreate_v2", &api->create, &missing);
  Resolve(library, "cublasDestroy_v2", &api->destroy, &missing);
  Resolve(library, "cublasSetStream_v2", &api->set_stream, &missing);
  Resolve(library, "cublasSetMathMode", &api->set_math_mode, &missing);
  Resolve(library, "cublasSgemmStridedBatched", &api->sgemm_strided_batched, &missing);
  if (!missing.empty()) {
    delete api;
    return absl::FailedPreconditionError(
        absl::StrCat(ROPE_CUBLAS_SONAME, " lacks ", missing, ": an incompatible cuBLAS"));
  }
  return api;
}

}  // namespace

absl::StatusOr<const CublasApi*> LoadCublas() {
  static const absl::StatusOr<const CublasApi*>* const loaded =
      new absl::StatusOr<const CublasApi*>(Load());
  return *loaded;
}

}  // namespace rope
