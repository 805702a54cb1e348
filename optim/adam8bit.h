// Adam and AdamW with 8-bit state, as bitsandbytes.optim.Adam8bit / AdamW8bit (Dettmers et al.
// 2021): each moment is kept as one uint8 code per element into a dynamic quantization map (signed
// for exp_avg, unsigned for exp_avg_sq) and one float32 absmax per block of 256 elements, about
// 2 x (1 + 4/256) = 2.03 bytes per parameter against Adam's 8. Each step dequantizes a block,
// updates the moments and the parameter in float32 and requantizes the moments against the block's
// new absmax (kernels/quantize8bit.h has the rule). A parameter with fewer than min_8bit_size
// elements (4096 by default, as bitsandbytes) keeps float32 moments instead.
//
// State per parameter, in the ledger and state_dict: exp_avg and exp_avg_sq (uint8, the
// parameter's shape) with exp_avg.absmax and exp_avg_sq.absmax (float32 [ceil(numel / 256)]), or
// exp_avg and exp_avg_sq in float32 below the threshold.
//
// Under ZeRO stages 1-2 a rank steps a flat slice of each parameter: DataParallel then starts every
// slice at a multiple of 256 elements and tells the optimizer the whole parameter's size (set_slice),
// so the rank keeps exactly its blocks of the state one process keeps for the whole parameter, and a
// state_dict gathered from the ranks is that state, loadable at any world size.
//
// As in bitsandbytes, the update differs from torch.optim.Adam in small ways: eps is added to
// sqrt(v) before the bias correction is divided out (eps * sqrt(1 - beta2^t) after), weight decay
// is decoupled for Adam8bit too and applied after the update (p *= 1 - lr * wd), and in a quantized
// tensor an element whose gradient is inf or NaN restarts its moments at 0 and keeps its value.
#pragma once
#include <memgrad/optim/optimizer.h>

namespace mg::optim {

struct Adam8bitOptions {
  double lr_ = 1e-3, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
  int64_t min_8bit_size_ = 4096;
  Adam8bitOptions(double lr = 1e-3) : lr_(lr) {}
  Adam8bitOptions& lr(double v) { return lr_ = v, *this; }
  Adam8bitOptions& betas(double b1, double b2) { return beta1_ = b1, beta2_ = b2, *this; }
  Adam8bitOptions& eps(double v) { return eps_ = v, *this; }
  Adam8bitOptions& weight_decay(double v) { return weight_decay_ = v, *this; }
  // Parameters with fewer elements keep float32 moments.
  Adam8bitOptions& min_8bit_size(int64_t v) { return min_8bit_size_ = v, *this; }
  Hyperparameters to_map() const;
};
// AdamW8bit's default weight decay is 1e-2 (bitsandbytes'); the update is the same.
struct AdamW8bitOptions : Adam8bitOptions {
  AdamW8bitOptions(double lr = 1e-3) : Adam8bitOptions(lr) { weight_decay_ = 1e-2; }
  AdamW8bitOptions& lr(double v) { return lr_ = v, *this; }
  AdamW8bitOptions& betas(double b1, double b2) { return beta1_ = b1, beta2_ = b2, *this; }
  AdamW8bitOptions& eps(double v) { return eps_ = v, *this; }
  AdamW8bitOptions& weight_decay(double v) { return weight_decay_ = v, *this; }
  AdamW8bitOptions& min_8bit_size(int64_t v) { return min_8bit_size_ = v, *this; }
};

class Adam8bit : public Optimizer {
 public:
  Adam8bit(std::vector<ParamGroup> groups, const Adam8bitOptions& options = {})
      : Adam8bit(std::move(groups), options, "Adam8bit") {}
  Adam8bit(const std::vector<Tensor>& params, const Adam8bitOptions& options = {})
      : Adam8bit(as_groups(params), options) {}
  Adam8bit(const std::vector<std::pair<std::string, Tensor>>& named, const Adam8bitOptions& options = {})
      : Adam8bit(as_groups(named), options) {}

  // Whether a parameter of `numel` elements keeps 8-bit state under `options` (min_8bit_size).
  static bool quantized(int64_t numel, const Hyperparameters& options);
  // The elements each absmax covers: blocks of the flattened parameter, from its first element.
  static constexpr int64_t kBlockSize = 256;

 protected:
  Adam8bit(std::vector<ParamGroup> groups, const Adam8bitOptions& options, const char* type);
  void update(const Hyperparameters& o, const std::vector<ParamUpdate>& params) override;
  // betas in [0, 1), eps and weight_decay >= 0, min_8bit_size a whole number >= 1.
  void check_options(const Hyperparameters& o) const override;
  std::vector<StateSpec> state_specs(const Tensor& param, const Hyperparameters& o) const override;
  // An absmax must be finite and >= 0 (a block's largest magnitude).
  void check_state(const std::string& key, const StateSpec& spec, const Tensor& value) const override;
};

class AdamW8bit : public Adam8bit {
 public:
  AdamW8bit(std::vector<ParamGroup> groups, const AdamW8bitOptions& options = {})
      : Adam8bit(std::move(groups), options, "AdamW8bit") {}
  AdamW8bit(const std::vector<Tensor>& params, const AdamW8bitOptions& options = {})
      : AdamW8bit(as_groups(params), options) {}
  AdamW8bit(const std::vector<std::pair<std::string, Tensor>>& named, const AdamW8bitOptions& options = {})
      : AdamW8bit(as_groups(named), options) {}
};

}  // namespace mg::optim
