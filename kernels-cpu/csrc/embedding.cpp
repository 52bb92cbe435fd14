// embedding and its backward (ws1_cpu::embedding, embedding_bwd).
//
// Forward: exact row gather (memcpy of the table row), so a token's embedding has no numerics.
// Backward: dE[v, :] = sum over the rows r with ids[r] == v, IN THE GIVEN ROW ORDER (the caller passes
// rows in canonical order), of dy[r, :] — plain fp32 adds, starting from +0. Parallel over column
// chunks of H: a thread owns whole columns and walks all rows serially, so no sum is ever split.
#include "ws1_cpu.h"

namespace {

void check_ids(const at::Tensor& ids, int64_t V, const char* op) {
  ws1::check_cpu(ids, op, "ids");
  ws1::check_dtype(ids, at::kLong, op, "ids");
  ws1::check_dim(ids, 1, op, "ids");
  WS1_CHECK(ids.is_contiguous(), op, ": ids must be contiguous");
  const int64_t* p = ids.data_ptr<int64_t>();
  for (int64_t i = 0; i < ids.numel(); ++i)
    WS1_CHECK(p[i] >= 0 && p[i] < V, op, ": token id ", p[i], " at row ", i, " out of range [0, ", V, ")");
}

at::Tensor embedding(const at::Tensor& ids, const at::Tensor& weight) {
  ws1::CallScope call("ws1_cpu::embedding");
  ws1::check_cpu(weight, "embedding", "weight");
  ws1::check_dim(weight, 2, "embedding", "weight");
  WS1_CHECK(weight.scalar_type() == at::kBFloat16 || weight.scalar_type() == at::kFloat,
            "embedding: weight must be bfloat16 or float32, got ", c10::toString(weight.scalar_type()));
  check_ids(ids, weight.size(0), "embedding");
  at::Tensor w = weight.contiguous();
  const int64_t T = ids.numel(), H = w.size(1), es = w.element_size();
  at::Tensor y = at::empty({T, H}, w.options());
  const int64_t* ip = ids.data_ptr<int64_t>();
  const char* src = static_cast<const char*>(w.data_ptr());
  char* dst = static_cast<char*>(y.data_ptr());
  at::parallel_for(0, T, 16, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) std::memcpy(dst + r * H * es, src + ip[r] * H * es, H * es);
  });
  return y;
}

at::Tensor embedding_bwd(const at::Tensor& dy_in, const at::Tensor& ids, int64_t num_embeddings) {
  ws1::CallScope call("ws1_cpu::embedding_bwd");
  ws1::check_cpu(dy_in, "embedding_bwd", "dy");
  ws1::check_dim(dy_in, 2, "embedding_bwd", "dy");
  WS1_CHECK(num_embeddings > 0, "embedding_bwd: num_embeddings must be > 0");
  check_ids(ids, num_embeddings, "embedding_bwd");
  WS1_CHECK(dy_in.size(0) == ids.numel(), "embedding_bwd: dy has ", dy_in.size(0), " rows, ids ", ids.numel());
  at::Tensor dy = dy_in.to(at::kFloat).contiguous();  // bf16 -> fp32 is exact
  const int64_t T = dy.size(0), H = dy.size(1);
  at::Tensor dE = ws1::empty_output({num_embeddings, H}, dy.options()).zero_();
  const int64_t* ip = ids.data_ptr<int64_t>();
  const float* g = dy.data_ptr<float>();
  float* out = dE.data_ptr<float>();
  constexpr int64_t kCols = 64;  // column chunk per task (does not affect bits)
  at::parallel_for(0, (H + kCols - 1) / kCols, 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t h0 = c * kCols, h1 = std::min(H, h0 + kCols);
      for (int64_t r = 0; r < T; ++r) {
        float* o = out + ip[r] * H;
        const float* s = g + r * H;
        for (int64_t h = h0; h < h1; ++h) o[h] = o[h] + s[h];
      }
    }
  });
  return dE;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(ws1_cpu, m) {
  m.def("embedding(Tensor ids, Tensor weight) -> Tensor", &embedding);
  m.def("embedding_bwd(Tensor dy, Tensor ids, int num_embeddings) -> Tensor", &embedding_bwd);
}
