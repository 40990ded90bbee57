// compute/convert/error_sums.h: accumulates ‖W − Ŵ‖²_F and ‖W‖²_F so every
// quantizer reports its relative error the same way.
#pragma once

#include <cmath>

namespace sluice::convert {

struct ErrorSums {
  double error = 0.0;
  double norm = 0.0;
  void add(double w, double w_hat) {
    error += (w - w_hat) * (w - w_hat);
    norm += w * w;
  }
  void add(const ErrorSums& other) {
    error += other.error;
    norm += other.norm;
  }
  double relative() const { return norm > 0.0 ? std::sqrt(error / norm) : 0.0; }
};

}  // namespace sluice::convert
