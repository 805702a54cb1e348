// `memgrad train --save` and `--resume`: a run's state in a safetensors file (the model, the float32
// masters, the optimizer, the grad scaler, the generator's position, the data's position) and the
// signature a resumed run must match.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "train.h"

namespace memgrad_cli {

// The flags a saved state must agree with to be resumed (steps, logging and limits may change).
// `accum` is the step's micro-batches over all data-parallel ranks: N ranks with accum A resume
// what one process with accum N * A saved, and the other way round.
std::string run_signature(const TrainFlags& f, const mg::train::ModelSpec& spec, int64_t accum);

// One training run's state, as a safetensors file: model.*, master.<parameter name> (the float32
// masters of a storage precision, whole, however many processes stepped them), optim.* (with data
// parallelism every rank's slices gathered), scaler.*, and in the metadata the step, the default
// generator's position, the run's signature and `metadata` (the data's position). `optimizer` may hold
// a data-parallel run's masters as "master.<i>" (DataParallel::state_dict: `names[i]`'s): they are
// saved by name, as one process's are.
void save_state(const std::string& path, int64_t step, const std::string& signature, const mg::nn::StateDict& model,
                mg::optim::StateDict optimizer, const std::vector<std::string>& names,
                const mg::amp::MasterWeights* masters, const mg::amp::GradScaler* scaler, mg::nn::Metadata metadata);

// A state written by save_state, read and checked before the model is built: a bad file, a
// different run or metadata that does not parse is a usage error (exit 2) naming --resume.
struct SavedState {
  mg::nn::StateDict tensors;
  mg::nn::Metadata meta;
  int64_t step = 0;
  uint64_t rng_seed = 0, rng_offset = 0;
};
SavedState read_state(const std::string& path, const std::string& signature);

// Loads `s` into the model, the optimizer and the scaler (each validates its part) and positions the
// default generator; returns the saved step. The float32 masters go to `masters` (one process), or,
// with `indexed_masters` (a data-parallel run of half parameters, `names` in its constructor's order),
// into the optimizer's dict as "master.<i>" for DataParallel::load_state_dict.
int64_t apply_state(const SavedState& s, const std::string& path, const std::vector<std::string>& names,
                    const std::function<void(const mg::nn::StateDict&)>& load_model,
                    const std::function<void(const mg::optim::StateDict&)>& load_optimizer,
                    mg::amp::MasterWeights* masters, bool indexed_masters, mg::amp::GradScaler* scaler);

}  // namespace memgrad_cli
