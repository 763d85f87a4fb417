// The MoE routing kernel alone (no torch): each case of bench_moe.py's alignment grid checked against a serial
// reference, then timed as CUDA-graph replays of 20 launches (median of 30). A kernel change is compared old/new by
// building this twice against two copies of moe_align.cu (MOE_SRC), in one run on the device; the old copy's
// moe_align_body.cuh goes beside it (quoted includes look beside the including file first):
//
//   mkdir old && for f in moe_align.cu moe_align_body.cuh; do git show REV:csrc/kernels/$f > old/$f; done
//
//   nvcc -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Icsrc/kernels [-DMOE_SRC='"old/moe_align.cu"'] \
//     benchmarks/moe_kernel_harness.cu csrc/kernels/device_caps.cu -o moe_harness && ./moe_harness new
//
// Prints "tag tokens top_k experts block ids us ok|WRONG"; MOE_CASE=tokens,top_k,experts,block runs one case
// (three launches, untimed: for ncu). Exits 1 if any case differs from the reference.
#ifndef MOE_SRC
#define MOE_SRC "moe_align.cu"
#endif
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>
#include MOE_SRC
using namespace dsmhist;

#define CK(x)                                                           \
  do {                                                                  \
    const cudaError_t e_ = (x);                                         \
    if (e_ != cudaSuccess) {                                            \
      printf("CUDA %s at line %d\n", cudaGetErrorString(e_), __LINE__); \
      exit(1);                                                          \
    }                                                                   \
  } while (0)

int main(int argc, char** argv) {
  const char* tag = argc > 1 ? argv[1] : "v";
  const int tokens_list[] = {1, 16, 256, 4096, 16384, 32768, 65536};
  const int topks[] = {2, 8};
  const int Es[] = {8, 64, 128, 256};
  const int bss[] = {16, 64, 256};
  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int bad = 0;
  const char* only = getenv("MOE_CASE");
  for (int E : Es)
    for (int k : topks)
      for (int t : tokens_list)
        for (int bs : bss) {
          if (only) {
            int a, b, c, d;
            sscanf(only, "%d,%d,%d,%d", &a, &b, &c, &d);
            if (a != t || b != k || c != E || d != bs) continue;
          }
          const int64_t n = int64_t(t) * k;
          std::mt19937 rng(t * 131 + k * 17 + E * 7 + bs);
          std::vector<int32_t> ids(n);
          std::vector<int> perm(E);
          for (int i = 0; i < t; ++i) {
            for (int e = 0; e < E; ++e) perm[e] = e;
            for (int j = 0; j < k; ++j) {
              int r = j + rng() % (E - j);
              std::swap(perm[j], perm[r]);
              ids[i * k + j] = perm[j];
            }
          }
          const int64_t sorted_size = n + int64_t(E) * (bs - 1);
          const int64_t blocks = (sorted_size + bs - 1) / bs;
          int32_t *d_ids, *d_sorted, *d_eids, *d_total;
          CK(cudaMalloc(&d_ids, n * 4));
          CK(cudaMalloc(&d_sorted, sorted_size * 4));
          CK(cudaMalloc(&d_eids, blocks * 4));
          CK(cudaMalloc(&d_total, 4));
          CK(cudaMemcpy(d_ids, ids.data(), n * 4, cudaMemcpyHostToDevice));
          CK(cudaMemset(d_sorted, 0x7f, sorted_size * 4));
          CK(cudaMemset(d_eids, 0x7f, blocks * 4));
          MoeParams p;
          p.ids = d_ids;
          p.n = n;
          p.num_experts = E;
          p.block_size = bs;
          p.sorted_ids = d_sorted;
          p.sorted_size = sorted_size;
          p.expert_ids = d_eids;
          p.expert_blocks = blocks;
          p.total = d_total;
          int32_t* d_workspace = nullptr;
          MoeLaunch L;
          CK(plan_moe_align(p, 0, &L));
          if (L.workspace_words > 0) CK(cudaMalloc(&d_workspace, L.workspace_words * 4));
          p.workspace = d_workspace;
          const auto launch = [&] {
            MoeLaunch ran;
            return launch_moe_align(p, L, 0, stream, &ran);
          };
          CK(launch());
          CK(cudaStreamSynchronize(stream));
          // The reference: a stable counting sort (common/moe.h's rules, every id kept: they are in range, no map).
          std::vector<int64_t> cnt(E, 0);
          for (auto v : ids) cnt[v]++;
          std::vector<int32_t> ref(sorted_size, int32_t(n)), refe(blocks, -1);
          std::vector<int64_t> start(E + 1, 0);
          for (int e = 0; e < E; ++e) start[e + 1] = start[e] + (cnt[e] + bs - 1) / bs * bs;
          std::vector<int64_t> pos(start.begin(), start.end() - 1);
          for (int64_t i = 0; i < n; ++i) ref[pos[ids[i]]++] = int32_t(i);
          for (int e = 0; e < E; ++e)
            for (int64_t b = start[e] / bs; b < start[e + 1] / bs; ++b) refe[b] = e;
          std::vector<int32_t> got(sorted_size), gote(blocks);
          int32_t gt;
          CK(cudaMemcpy(got.data(), d_sorted, sorted_size * 4, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(gote.data(), d_eids, blocks * 4, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(&gt, d_total, 4, cudaMemcpyDeviceToHost));
          const bool ok = got == ref && gote == refe && gt == start[E];
          if (!ok) ++bad;
          if (only) {
            for (int r = 0; r < 3; ++r) CK(launch());
            CK(cudaStreamSynchronize(stream));
            printf("%s ok=%d\n", tag, ok);
            continue;
          }
          cudaGraph_t g;
          cudaGraphExec_t ge;
          CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
          for (int r = 0; r < 20; ++r) CK(launch());
          CK(cudaStreamEndCapture(stream, &g));
          CK(cudaGraphInstantiate(&ge, g, 0));
          for (int r = 0; r < 5; ++r) CK(cudaGraphLaunch(ge, stream));
          cudaEvent_t a, b;
          CK(cudaEventCreate(&a));
          CK(cudaEventCreate(&b));
          std::vector<float> ms;
          for (int r = 0; r < 30; ++r) {
            CK(cudaEventRecord(a, stream));
            CK(cudaGraphLaunch(ge, stream));
            CK(cudaEventRecord(b, stream));
            CK(cudaEventSynchronize(b));
            float m;
            CK(cudaEventElapsedTime(&m, a, b));
            ms.push_back(m);
          }
          std::sort(ms.begin(), ms.end());
          printf("%s %d %d %d %d %lld %.2f %s blocks=%d threads=%d\n", tag, t, k, E, bs, (long long)n,
                 ms[15] / 20 * 1e3, ok ? "ok" : "WRONG", L.blocks, L.threads);
          cudaGraphExecDestroy(ge);
          cudaGraphDestroy(g);
          cudaEventDestroy(a);
          cudaEventDestroy(b);
          cudaFree(d_ids);
          cudaFree(d_sorted);
          cudaFree(d_eids);
          cudaFree(d_total);
          cudaFree(d_workspace);
        }
  printf("%s bad=%d\n", tag, bad);
  return bad != 0;
}
