// GPU benchmark of the CUDA backend. Every speed is reported beside a
// baseline measured in the same run on the same device:
//   - rotate kernel on q [1,32768,32,128] + k [1,32768,8,128] (bf16, f32),
//     device-resident, against a device-to-device cudaMemcpy of the same
//     bytes (both read and write every byte once; target >= 80%);
//   - decode shape q [64,1,32,128] + k [64,1,8,128] bf16: kernel latency,
//     and the backend's Rotate (host in, host out) latency;
//   - attention scores (rotated copies + GEMMs + mask/softmax, on the
//     device) against the bare cuBLAS GEMMs of the same shapes, and the
//     backend's AttentionScores end to end.
// Without a device it prints why and exits 0 (so scripts can run it
// anywhere). Writes JSON (--out) and markdown (--md).
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/backends/cuda/cublas_api.h"
#include "core/backends/cuda/cuda_backend.h"
#include "core/backends/cuda/gemm_plan.h"
#include "core/backends/cuda/kernel_launchers.h"
#include "core/engine/rope_table.h"

ABSL_FLAG(std::string, out, "", "write results as JSON to this file");
ABSL_FLAG(std::string, md, "", "write results as markdown to this file");
ABSL_FLAG(int, iterations, 20, "timed launches per large case (after 3 warm-ups)");

namespace rope {
namespace {

struct Row {
  std::string name;
  double value;
  std::string unit;
  std::string note;
};

std::vector<Row> g_rows;

void Report(const std::string& name, double value, const std::string& unit,
            const std::string& note = "") {
  g_rows.push_back({name, value, unit, note});
  std::printf("%-58s %12.3f %-8s %s\n", name.c_str(), value, unit.c_str(), note.c_str());
  std::fflush(stdout);
}

bool Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "cuda_bench: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

// Milliseconds per call of `fn` (enqueues on `stream`), averaged over
// `iterations` calls timed with events after 3 warm-ups.
double TimeMs(cudaStream_t stream, int iterations, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream);
  for (int i = 0; i < iterations; ++i) fn();
  cudaEventRecord(stop, stream);
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / iterations;
}

double MedianUs(int calls, const std::function<void()>& fn) {
  for (int i = 0; i < 3; ++i) fn();
  std::vector<double> us;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// A table's blocks on the device, and the device block-pointer arrays the
// kernels index through (TableRows), as the backend's DeviceTableCache and
// UploadTableRows make them.
struct DeviceTableCopy {
  std::vector<void*> allocations;
  TableRows rows;
  ~DeviceTableCopy() {
    for (void* p : allocations) cudaFree(p);
  }
};

bool Upload(const RopeTable& table, DeviceTableCopy* d) {
  const int64_t slots = table.block_slots();
  std::vector<const float*> pointers(2 * slots, nullptr);
  for (int64_t i = 0; i < slots; ++i) {
    const TableBlock& block = *table.block(i);
    const size_t bytes = static_cast<size_t>(block.byte_size() / 2);
    float *cos = nullptr, *sin = nullptr;
    if (!Check(cudaMalloc(&cos, bytes), "cudaMalloc table block")) return false;
    d->allocations.push_back(cos);
    if (!Check(cudaMalloc(&sin, bytes), "cudaMalloc table block")) return false;
    d->allocations.push_back(sin);
    if (!Check(cudaMemcpy(cos, block.cos(), bytes, cudaMemcpyHostToDevice), "upload") ||
        !Check(cudaMemcpy(sin, block.sin(), bytes, cudaMemcpyHostToDevice), "upload")) {
      return false;
    }
    pointers[i] = cos;
    pointers[slots + i] = sin;
  }
  void* device_pointers = nullptr;
  const size_t pointer_bytes = pointers.size() * sizeof(const float*);
  if (!Check(cudaMalloc(&device_pointers, pointer_bytes), "cudaMalloc block pointers")) {
    return false;
  }
  d->allocations.push_back(device_pointers);
  if (!Check(cudaMemcpy(device_pointers, pointers.data(), pointer_bytes, cudaMemcpyHostToDevice),
             "upload block pointers")) {
    return false;
  }
  d->rows = table.rows();
  d->rows.cos_blocks = static_cast<const float* const*>(device_pointers);
  d->rows.sin_blocks = static_cast<const float* const*>(device_pointers) + slots;
  return true;
}

std::shared_ptr<const RopeTable> Table(uint32_t rotary_dim, uint32_t max_len) {
  TableKey key;
  key.theta = 500000.0;
  key.rotary_dim = rotary_dim;
  key.max_len = max_len;
  return RopeTable::Build(key);
}

// Rotate kernel vs cudaMemcpy D2D of the same bytes, one storage type.
void RotateBandwidth(kernels::Storage storage, const char* tag, int64_t max_blocks,
                     cudaStream_t stream) {
  const int64_t seq = 32768, hq = 32, hk = 8, d = 128;
  const int64_t elem = kernels::StorageBytes(storage);
  const int64_t q_bytes = seq * hq * d * elem, k_bytes = seq * hk * d * elem;
  const int64_t bytes = q_bytes + k_bytes;
  char *buf = nullptr, *dst = nullptr;
  if (!Check(cudaMalloc(&buf, bytes), "cudaMalloc q/k") ||
      !Check(cudaMalloc(&dst, bytes), "cudaMalloc copy target")) {
    return;
  }
  cudaMemset(buf, 0x3c, bytes);  // small finite values in every storage type
  const std::shared_ptr<const RopeTable> table = Table(128, 32768);
  DeviceTableCopy dt;
  if (!Upload(*table, &dt)) return;
  kernels::RotateKernelParams p;
  p.q = buf;
  p.q_heads = static_cast<int>(hq);
  p.k = buf + q_bytes;
  p.k_heads = static_cast<int>(hk);
  p.tokens = seq;
  p.head_dim = static_cast<int>(d);
  p.rotary_dim = static_cast<int>(d);
  p.table = dt.rows;
  p.positions.seq = seq;
  kernels::LaunchConfig launch;
  launch.stream = stream;
  launch.max_blocks = max_blocks;
  const int iterations = absl::GetFlag(FLAGS_iterations);
  const double rotate_ms =
      TimeMs(stream, iterations, [&] { kernels::Rotate(p, storage, false, launch); });
  const double interleaved_ms =
      TimeMs(stream, iterations, [&] { kernels::Rotate(p, storage, true, launch); });
  const double copy_ms = TimeMs(stream, iterations, [&] {
    cudaMemcpyAsync(dst, buf, bytes, cudaMemcpyDeviceToDevice, stream);
  });
  Check(cudaGetLastError(), "rotate bandwidth");
  auto rate = [&](double ms) { return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9; };
  const std::string shape = absl::StrCat(tag, " q[1,32768,32,128]+k[1,32768,8,128]");
  Report(absl::StrCat("rotate half-layout ", shape), rate(rotate_ms), "GB/s",
         absl::StrFormat("%.3f ms", rotate_ms));
  Report(absl::StrCat("rotate interleaved ", shape), rate(interleaved_ms), "GB/s",
         absl::StrFormat("%.3f ms", interleaved_ms));
  Report(absl::StrCat("cudaMemcpy D2D same bytes (", tag, ")"), rate(copy_ms), "GB/s",
         absl::StrFormat("%.3f ms", copy_ms));
  Report(absl::StrCat("rotate/memcpy bandwidth ratio half (", tag, ")"), copy_ms / rotate_ms, "x",
         "target >= 0.80");
  Report(absl::StrCat("rotate/memcpy bandwidth ratio interleaved (", tag, ")"),
         copy_ms / interleaved_ms, "x", "target >= 0.80");
  cudaFree(buf);
  cudaFree(dst);
}

void DecodeLatency(int64_t max_blocks, cudaStream_t stream) {
  const int64_t batch = 64, hq = 32, hk = 8, d = 128;
  const int64_t q_bytes = batch * hq * d * 2, k_bytes = batch * hk * d * 2;
  char* buf = nullptr;
  int64_t* positions = nullptr;
  if (!Check(cudaMalloc(&buf, q_bytes + k_bytes), "cudaMalloc") ||
      !Check(cudaMalloc(&positions, batch * sizeof(int64_t)), "cudaMalloc")) {
    return;
  }
  cudaMemset(buf, 0x3c, q_bytes + k_bytes);
  std::vector<int64_t> host_positions(batch);
  for (int64_t b = 0; b < batch; ++b) host_positions[b] = 1000 + 37 * b;
  cudaMemcpy(positions, host_positions.data(), batch * sizeof(int64_t), cudaMemcpyHostToDevice);
  const std::shared_ptr<const RopeTable> table = Table(128, 8192);
  DeviceTableCopy dt;
  if (!Upload(*table, &dt)) return;
  kernels::RotateKernelParams p;
  p.q = buf;
  p.q_heads = static_cast<int>(hq);
  p.k = buf + q_bytes;
  p.k_heads = static_cast<int>(hk);
  p.tokens = batch;
  p.head_dim = static_cast<int>(d);
  p.rotary_dim = static_cast<int>(d);
  p.table = dt.rows;
  p.positions.seq = 1;
  p.positions.count = batch;  // one position per sequence (decode)
  p.positions.explicit_positions = positions;
  kernels::LaunchConfig launch;
  launch.stream = stream;
  launch.max_blocks = max_blocks;
  const double ms =
      TimeMs(stream, 1000, [&] { kernels::Rotate(p, kernels::Storage::kBFloat16, false, launch); });
  Report("rotate kernel, decode q[64,1,32,128]+k[64,1,8,128] bf16", ms * 1e3, "us",
         "back-to-back launches, per launch");
  cudaFree(buf);
  cudaFree(positions);

  // The backend: host tensors in and out (pinned staging, H2D, kernel, D2H).
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
  if (!backend.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", backend.status().ToString().c_str());
    return;
  }
  std::vector<uint16_t> q(batch * hq * d, 0x3c3c), k(batch * hk * d, 0x3c3c);
  RotateArgs args;
  args.dtype = DType::kBFloat16;
  args.layout = Layout::kHalf;
  args.batch = batch;
  args.seq = 1;
  args.head_dim = d;
  args.rotary_dim = d;
  args.q = q.data();
  args.q_heads = hq;
  args.k = k.data();
  args.k_heads = hk;
  args.positions.seq = 1;
  args.positions.count = batch;
  args.positions.explicit_positions = host_positions.data();
  const double us = MedianUs(200, [&] { (void)(*backend)->Rotate(*table, args); });
  Report("backend Rotate (host->device->host), decode shape bf16", us, "us", "median of 200");
}

void Attention(int64_t max_blocks, cudaStream_t stream) {
  kernels::AttentionDims dims;
  dims.batch = 1;
  dims.q_seq = 2048;
  dims.k_seq = 2048;
  dims.q_heads = 32;
  dims.k_heads = 8;
  dims.head_dim = 128;
  const int64_t q_elems = dims.batch * dims.q_seq * dims.q_heads * dims.head_dim;
  const int64_t k_elems = dims.batch * dims.k_seq * dims.k_heads * dims.head_dim;
  const int64_t s_elems = dims.batch * dims.q_heads * dims.q_seq * dims.k_seq;
  float *q = nullptr, *k = nullptr, *qf = nullptr, *kf = nullptr, *scores = nullptr;
  if (!Check(cudaMalloc(&q, q_elems * 4), "cudaMalloc") ||
      !Check(cudaMalloc(&k, k_elems * 4), "cudaMalloc") ||
      !Check(cudaMalloc(&qf, q_elems * 4), "cudaMalloc") ||
      !Check(cudaMalloc(&kf, k_elems * 4), "cudaMalloc") ||
      !Check(cudaMalloc(&scores, s_elems * 4), "cudaMalloc")) {
    return;
  }
  cudaMemset(q, 0x3c, q_elems * 4);
  cudaMemset(k, 0x3c, k_elems * 4);
  cudaMemset(qf, 0x3c, q_elems * 4);
  cudaMemset(kf, 0x3c, k_elems * 4);
  const std::shared_ptr<const RopeTable> table = Table(128, 4096);
  DeviceTableCopy dt;
  if (!Upload(*table, &dt)) return;
  const absl::StatusOr<const CublasApi*> cublas = LoadCublas();
  if (!cublas.ok()) {
    std::fprintf(stderr, "cuda_bench: %s\n", cublas.status().ToString().c_str());
    return;
  }
  cublasHandle_t handle;
  if ((*cublas)->create(&handle) != CUBLAS_STATUS_SUCCESS) return;
  (*cublas)->set_stream(handle, stream);
  (*cublas)->set_math_mode(handle, CUBLAS_PEDANTIC_MATH);
  const float scale = 1.0f / std::sqrt(128.0f);
  const std::vector<kernels::StridedGemm> plan = kernels::PlanScoreGemms(dims, scale);
  auto gemms = [&] {
    for (const kernels::StridedGemm& g : plan) {
      (*cublas)->sgemm_strided_batched(
          handle, g.op_a == kernels::GemmOp::kT ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, g.m, g.n,
          g.k, &g.alpha, kf + g.a_offset, g.lda, g.stride_a, qf + g.b_offset, g.ldb, g.stride_b,
          &g.beta, scores + g.c_offset, g.ldc, g.stride_c, g.batch);
    }
  };
  kernels::LaunchConfig launch;
  launch.stream = stream;
  launch.max_blocks = max_blocks;
  kernels::RotatedCopyParams copy;
  copy.head_dim = 128;
  copy.rotary_dim = 128;
  copy.table = dt.rows;
  kernels::MaskSoftmaxParams mask;
  mask.scores = scores;
  mask.batch = dims.batch;
  mask.heads = dims.q_heads;
  mask.q_seq = dims.q_seq;
  mask.k_seq = dims.k_seq;
  mask.q_positions.seq = dims.q_seq;
  mask.k_positions.seq = dims.k_seq;
  mask.causal = true;
  mask.softmax = true;
  auto pipeline = [&] {
    copy.in = q;
    copy.out = qf;
    copy.tokens = dims.q_seq;
    copy.heads = 32;
    copy.positions.seq = dims.q_seq;
    kernels::RotatedCopy(copy, kernels::Storage::kFloat32, false, launch);
    copy.in = k;
    copy.out = kf;
    copy.tokens = dims.k_seq;
    copy.heads = 8;
    kernels::RotatedCopy(copy, kernels::Storage::kFloat32, false, launch);
    gemms();
    kernels::MaskSoftmax(mask, launch);
  };
  const double gemm_ms = TimeMs(stream, 10, gemms);
  const double pipeline_ms = TimeMs(stream, 10, pipeline);
  Check(cudaGetLastError(), "attention");
  const double flops = 2.0 * dims.q_heads * dims.q_seq * dims.k_seq * dims.head_dim;
  Report("cublasSgemmStridedBatched scores, Hq32 Hkv8 S2048 D128", flops / (gemm_ms * 1e-3) / 1e12,
         "TFLOP/s", absl::StrFormat("%.3f ms", gemm_ms));
  Report("attention on device (rotate+GEMM+causal softmax), same shape",
         flops / (pipeline_ms * 1e-3) / 1e12, "TFLOP/s", absl::StrFormat("%.3f ms", pipeline_ms));
  Report("GEMM-only / full attention time ratio", gemm_ms / pipeline_ms, "x",
         "1.0 = rotation and softmax are free");
  (*cublas)->destroy(handle);
  cudaFree(q);
  cudaFree(k);
  cudaFree(qf);
  cudaFree(kf);
  cudaFree(scores);

  // The backend end to end on a smaller shape (host bytes in, scores out).
  absl::StatusOr<std::unique_ptr<Backend>> backend = NewCudaBackend(0);
  if (!backend.ok()) return;
  const int64_t s = 1024;
  std::vector<uint16_t> hq(s * 32 * 128, 0x3c3c), hk(s * 8 * 128, 0x3c3c);
  std::vector<float> host_scores(32 * s * s);
  AttentionArgs args;
  args.dtype = DType::kBFloat16;
  args.batch = 1;
  args.q_seq = s;
  args.k_seq = s;
  args.q_heads = 32;
  args.k_heads = 8;
  args.head_dim = 128;
  args.rotary_dim = 128;
  args.q = hq.data();
  args.k = hk.data();
  args.q_positions.seq = s;
  args.k_positions.seq = s;
  args.causal = true;
  args.softmax = true;
  args.scale = scale;
  args.scores = host_scores.data();
  const double us = MedianUs(5, [&] { (void)(*backend)->AttentionScores(*table, args); });
  Report("backend AttentionScores end to end, bf16 Hq32 Hkv8 S1024 D128", us / 1e3, "ms",
         "median of 5; 128 MiB of scores back to the host");
}

void Write(const std::string& device) {
  const std::string json_path = absl::GetFlag(FLAGS_out);
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << "{\"device\": \"" << device << "\", \"rows\": [\n";
    for (size_t i = 0; i < g_rows.size(); ++i) {
      f << "  {\"name\": \"" << g_rows[i].name << "\", \"value\": " << g_rows[i].value
        << ", \"unit\": \"" << g_rows[i].unit << "\", \"note\": \"" << g_rows[i].note << "\"}"
        << (i + 1 < g_rows.size() ? ",\n" : "\n");
    }
    f << "]}\n";
  }
  const std::string md_path = absl::GetFlag(FLAGS_md);
  if (!md_path.empty()) {
    std::ofstream f(md_path);
    f << "# CUDA benchmark\n\n- device: " << device << "\n\n| case | value | unit | note |\n"
      << "|---|---|---|---|\n";
    for (const Row& r : g_rows) {
      f << "| " << r.name << " | " << absl::StrFormat("%.3f", r.value) << " | " << r.unit << " | "
        << r.note << " |\n";
    }
  }
}

int Run() {
  const absl::StatusOr<int> devices = CountCudaDevices();
  if (!devices.ok()) {
    std::printf("cuda_bench: skipped: %s\n", devices.status().ToString().c_str());
    return 0;
  }
  cudaDeviceProp props;
  if (!Check(cudaSetDevice(0), "cudaSetDevice") ||
      !Check(cudaGetDeviceProperties(&props, 0), "cudaGetDeviceProperties")) {
    return 1;
  }
  const std::string device =
      absl::StrFormat("%s (sm_%d%d, %d SMs, %.1f GiB)", props.name, props.major, props.minor,
                      props.multiProcessorCount, props.totalGlobalMem / double(1 << 30));
  std::printf("cuda_bench on %s\n", device.c_str());
  const int64_t max_blocks = int64_t{32} * props.multiProcessorCount;
  cudaStream_t stream;
  cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  RotateBandwidth(kernels::Storage::kBFloat16, "bf16", max_blocks, stream);
  RotateBandwidth(kernels::Storage::kFloat32, "f32", max_blocks, stream);
  DecodeLatency(max_blocks, stream);
  Attention(max_blocks, stream);
  cudaStreamDestroy(stream);
  Write(device);
  return 0;
}

}  // namespace
}  // namespace rope

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return rope::Run();
}
