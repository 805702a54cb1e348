// Flags that `memgrad train` and `memgrad plan` share: which model, which step (optimizer,
// precision, checkpoint policy) and how they map onto memgrad's planner types.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include <memgrad/memgrad.h>

// CLI11's types by name only: CLI/CLI.hpp costs each file that includes it about 6 s of compiling
// (its validators are objects that every such file constructs), so only the files that build or
// read flags include it.
namespace CLI {
class App;
class Option;
class Validator;
}  // namespace CLI

namespace memgrad_cli {

// Exit codes: 0 success, 1 a runtime error, 2 a bad flag or value, 3 out of memory.
inline constexpr int kExitError = 1, kExitUsage = 2, kExitOutOfMemory = 3;

// A flag's value is wrong in a way CLI11's validators cannot see (e.g. n_embd % n_head != 0).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Flag values are checked on their text, so nothing is clamped or wrapped: CLI11 alone reads
// integers with strtoll/strtoull in base 0 (99999999999999999999 becomes 2^63 - 1, -1 wraps to
// 2^64 - 1 in an unsigned flag, 010 is octal) and its number checks let NaN through. Out of range
// is a usage error (exit 2) whose message prints the bounds readably.
inline constexpr int64_t kMaxCount = int64_t(1) << 62;  // steps, sizes: sums and products of two stay in int64

// Decimal text of an integer ("-12", "0"; no "+", spaces or other bases) in T's range, else nullopt.
template <class T>
std::optional<T> parse_integer(const std::string& text);
// Integers in [lo, hi] (transforms the text to canonical decimal for CLI11).
CLI::Validator integer_in(int64_t lo, int64_t hi);
CLI::Validator any_uint64();  // [0, 2^64 - 1], e.g. seeds
// Finite numbers >= lo (> lo when `open`) and <= hi (hi may be infinity: no upper bound).
CLI::Validator number_in(double lo, double hi, bool open = false);
// A byte size such as 512MiB or 80GB (CLI11's AsSizeValue) in [1, 2^63 - 1], for --memory-limit, --budget and
// --bucket-cap (0 is refused: it silently meant none).
CLI::Option* byte_size(CLI::Option* option);
// Throws UsageError unless `path` can be written when the run ends (mg::output_file: a regular file, a
// symbolic link to one, or a new name in an existing writable folder; never a folder, FIFO or device),
// checked before any work, not after a long run: a file is made beside it and removed, as the write will
// make one. Every flag that writes a file is checked with it.
void check_writable(const char* flag, const std::string& path);
// Refuses an empty value ("expected <what>, got an empty value"): paths, where '' would otherwise
// silently mean "none".
CLI::Validator non_empty(const std::string& what);
// An existing regular file (or a symbolic link to one), checked without blocking on a FIFO
// (mg::InputFile): files read whole, such as --resume and memgrad view's snapshots.
CLI::Validator input_file();

struct ModelFlags {
  std::string model;  // tiny | gpt2-124m | gpt2-350m | gpt2-774m | gpt2-1.5b | custom | mlp
  int64_t n_layer = 0, n_head = 0, n_embd = 0, vocab = 0;  // 0: the preset's value
  int64_t layers = 8, width = 256;                         // mlp
  double dropout = 0.0;
  std::string attention = "composed";  // composed | fused (scaled_dot_product_attention)
  std::string fuse = "on";             // on | off: GPTConfig::fused_elementwise
};

struct StepFlags {
  int64_t batch = 0, seq = 0;                              // seq is the GPT's block size too
  std::string optimizer = mg::optim::default_optimizer();  // a name of optim/registry.h
  double momentum = 0.0;                                   // sgd
  std::string precision = "fp32";   // fp32 | fp16 | bf16 (autocast) | fp16-storage | bf16-storage
  std::string checkpoint = "none";  // none | every-K | sqrt | selective | auto
  uint64_t budget = 0;              // bytes; `auto` chooses segments for it
  int64_t accum = 1;                // micro-batches per optimizer step
  double clip = 0.0;                // max gradient norm (0: off)
  // Data parallelism: ZeRO stage and bucket size (train and plan); the world size and rank are the
  // launcher's for train and flags for plan.
  int zero = 0;
  uint64_t bucket_cap = uint64_t(25) << 20;
  int64_t world_size = 1, rank = 0;
  // Parameters that do not stay resident: --offload params (host memory, stage 3's schedule at any
  // world size) and whether the next unit is gathered while one runs (--no-unit-prefetch).
  bool offload_params = false;
  bool unit_prefetch = true;
  // The DataLoader train reads through (and plan counts): background threads, batches each reads
  // ahead, page-locked host buffers (cuda).
  int64_t num_workers = 0, prefetch = 2;
  bool pin_memory = false;
  bool step_in_backward = false;     // each parameter stepped as its gradient completes (StepOptions)
  bool expandable_segments = false;  // the allocator's mode (set_allocator_config), for train and plan alike
};

void add_model_flags(CLI::App& app, ModelFlags& m);
void add_step_flags(CLI::App& app, StepFlags& s);
// --zero and --bucket-cap (train and plan).
void add_data_parallel_flags(CLI::App& app, StepFlags& s);

// The planner's description of the model (GPT presets have GPT-2's vocabulary of 50257).
mg::train::ModelSpec model_spec(const ModelFlags& m, int64_t seq);
std::string model_str(const mg::train::ModelSpec& spec);
// Loss scaling (a GradScaler) for the float16 modes.
mg::train::StepOptions step_options(const StepFlags& s);
mg::train::InputShape input_shape(const StepFlags& s);
// The DataLoader of a step: batches of --batch, every one full (drop_last), --num-workers,
// --prefetch and --pin-memory, delivered to `device`. UsageError for --pin-memory unless the device
// is cuda (on meta: the device the plan is for).
mg::data::DataLoaderOptions loader_options(const StepFlags& s, const mg::Device& device);
// One example of the built-in model's data: a GPT's window of --seq token ids and the same window one
// token later; an MLP's input and target rows.
std::pair<mg::data::Field, mg::data::Field> example_fields(const mg::train::ModelSpec& spec, const StepFlags& s);
// What `memgrad train` runs on a device, as a program for the planner: the built-in model and its
// trainer (plan::program), after the teacher matrix the MLP's data is drawn through ([width, width]
// float32, Input), which train holds on the cpu, and the DataLoader's buffers (data::plan_buffers).
// Every plan of the command is of this program.
mg::plan::Program train_program(const mg::train::ModelSpec& spec, const StepFlags& s);
// none, every-K, sqrt or selective for n blocks; `auto` chooses segments for the budget with the
// planner: among its methods' plans that run under the budget on meta, the one that recomputes
// least (printing the side-by-side table when `table` is set). `plan_options` says what device the
// plans are for.
mg::train::Policy policy(const StepFlags& s, const mg::train::ModelSpec& spec, bool table,
                         const mg::plan::PlanOptions& plan_options = {});

int64_t parameter_count(const mg::train::ModelSpec& spec);
std::string thousands(int64_t n);  // 124439808 -> "124,439,808"

}  // namespace memgrad_cli
