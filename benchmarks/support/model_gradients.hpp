// benchmarks/support/model_gradients.hpp — the gradient lists of two real models, as fixed
// float32 shapes in the order backward produces them (the reverse of the parameters' order):
// torchvision's ResNet-50 (161 tensors, 25,557,032 values) and BERT-base as Hugging Face builds
// it without heads (199 tensors, 109,482,240 values).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

#include <strata/fusion/bucket_plan.hpp>

namespace strata::bench {

namespace detail {
inline void push(std::vector<fusion::GradientSpec>& list, std::size_t count) {
  list.push_back({DataType::float32, count});
}
}  // namespace detail

/// ResNet-50's parameters, in backward order.
inline std::vector<fusion::GradientSpec> resnet50_gradients() {
  std::vector<fusion::GradientSpec> list;
  const auto conv = [&](std::size_t out, std::size_t in, std::size_t k) {
    detail::push(list, out * in * k * k);
  };
  const auto batch_norm = [&](std::size_t channels) {
    detail::push(list, channels);  // weight
    detail::push(list, channels);  // bias
  };
  conv(64, 3, 7);
  batch_norm(64);
  std::size_t in = 64;
  const std::size_t stages[4][2] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (const auto& [planes, blocks] : stages) {
    for (std::size_t b = 0; b < blocks; ++b) {
      conv(planes, in, 1);
      batch_norm(planes);
      conv(planes, planes, 3);
      batch_norm(planes);
      conv(planes * 4, planes, 1);
      batch_norm(planes * 4);
      if (b == 0) {  // the downsample branch
        conv(planes * 4, in, 1);
        batch_norm(planes * 4);
      }
      in = planes * 4;
    }
  }
  detail::push(list, 1000 * 2048);  // fc.weight
  detail::push(list, 1000);         // fc.bias
  std::reverse(list.begin(), list.end());
  return list;
}

/// BERT-base's parameters (embeddings, 12 encoder layers, pooler), in backward order.
inline std::vector<fusion::GradientSpec> bert_base_gradients() {
  constexpr std::size_t hidden = 768;
  constexpr std::size_t intermediate = 3072;
  std::vector<fusion::GradientSpec> list;
  const auto linear = [&](std::size_t out, std::size_t in) {
    detail::push(list, out * in);
    detail::push(list, out);
  };
  const auto layer_norm = [&] {
    detail::push(list, hidden);
    detail::push(list, hidden);
  };
  detail::push(list, 30522 * hidden);  // word embeddings
  detail::push(list, 512 * hidden);    // position embeddings
  detail::push(list, 2 * hidden);      // token type embeddings
  layer_norm();
  for (int layer = 0; layer < 12; ++layer) {
    linear(hidden, hidden);  // query
    linear(hidden, hidden);  // key
    linear(hidden, hidden);  // value
    linear(hidden, hidden);  // attention output
    layer_norm();
    linear(intermediate, hidden);
    linear(hidden, intermediate);
    layer_norm();
  }
  linear(hidden, hidden);  // pooler
  std::reverse(list.begin(), list.end());
  return list;
}

inline std::size_t total_count(const std::vector<fusion::GradientSpec>& list) {
  std::size_t total = 0;
  for (const auto& spec : list)
    total += spec.count;
  return total;
}

}  // namespace strata::bench
