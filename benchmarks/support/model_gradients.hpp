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

/// What computing each of ResNet-50's gradients costs in backward, in multiply-adds per image at
/// 224 × 224, in the order of resnet50_gradients(): a convolution's weights cost its weights ×
/// its output's height × width (the weight gradient, and as much again for the input's, a
/// constant factor), a batch norm's weight and bias each its channels × height × width, the
/// fully connected layer its weights. torchvision's ResNet-50 v1.5 (the stride on the 3 × 3
/// convolution).
inline std::vector<double> resnet50_backward_costs() {
  std::vector<double> costs;
  std::size_t side = 112;  // conv1's output
  const auto conv = [&](std::size_t out, std::size_t in, std::size_t k, std::size_t at) {
    costs.push_back(static_cast<double>(out * in * k * k) * static_cast<double>(at * at));
  };
  const auto batch_norm = [&](std::size_t channels, std::size_t at) {
    costs.push_back(static_cast<double>(channels * at * at));
    costs.push_back(static_cast<double>(channels * at * at));
  };
  conv(64, 3, 7, side);
  batch_norm(64, side);
  side = 56;  // after the max pool
  std::size_t in = 64;
  const std::size_t stages[4][2] = {{64, 3}, {128, 4}, {256, 6}, {512, 3}};
  for (std::size_t stage = 0; stage < 4; ++stage) {
    const auto [planes, blocks] = stages[stage];
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::size_t out_side = (b == 0 && stage > 0) ? side / 2 : side;
      conv(planes, in, 1, side);  // before the stride
      batch_norm(planes, side);
      conv(planes, planes, 3, out_side);
      batch_norm(planes, out_side);
      conv(planes * 4, planes, 1, out_side);
      batch_norm(planes * 4, out_side);
      if (b == 0) {
        conv(planes * 4, in, 1, out_side);
        batch_norm(planes * 4, out_side);
      }
      in = planes * 4;
      side = out_side;
    }
  }
  costs.push_back(1000.0 * 2048.0);  // fc.weight
  costs.push_back(1000.0);           // fc.bias
  std::reverse(costs.begin(), costs.end());
  return costs;
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
