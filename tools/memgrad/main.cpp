// memgrad: train a model and see where its memory goes, or plan a step's memory before running it.
//
//   memgrad train [flags]    a small GPT on embedded sonnets (or an MLP), with a live memory line
//   memgrad plan [flags]     one step of GPT-2 (or any size) on the meta device: peak and breakdown
//   memgrad view A.json [B]  the interactive memory timeline of a snapshot, or of two compared
//
// Exit codes: 0 done, 1 error, 2 bad flag or value (MG_* environment variables included), 3 out of memory.
#include <cstdio>

#include "options.h"
#include "plan.h"
#include "train.h"
#include "view.h"

int main(int argc, char** argv) {
  using namespace memgrad_cli;
  CLI::App app{"memgrad: where training memory goes, to the byte, and how to shrink it", "memgrad"};
  app.require_subcommand(1);
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);  // a repeated flag: the last wins
  TrainFlags train;
  CLI::App* train_cmd = app.add_subcommand("train", "train a GPT on embedded text (or an MLP) and report its memory");
  add_train_flags(*train_cmd, train);
  PlanFlags plan;
  CLI::App* plan_cmd =
      app.add_subcommand("plan", "predict a training step's peak memory on the meta device, without allocating it");
  add_plan_flags(*plan_cmd, plan);
  ViewFlags view;
  CLI::App* view_cmd = app.add_subcommand(
      "view", "the memory timeline of a snapshot as an HTML page (two snapshots: compared on one time axis)");
  add_view_flags(*view_cmd, view);
  // Under mpirun a rank that fails ends every rank (MPI_Abort with its exit code), so none is left
  // waiting in a collective; its message names the rank.
  const bool launched = mg::distributed::launched_world_size() > 1;
  const std::string who =
      launched ? "memgrad (rank " + std::to_string(mg::distributed::launched_rank()) + ")" : "memgrad";
  auto fail = [launched](int code) {
    std::fflush(stdout);
    std::fflush(stderr);
    if (launched) mg::distributed::abort(code);
    return code;
  };
  try {
    app.parse(argc, argv);
    try {
      mg::check_environment();  // every MG_* variable, as a flag is checked: exit 2 for a bad value
    } catch (const mg::ValueError& e) {
      throw UsageError(e.what());
    }
    if ((train_cmd->parsed() && train.step.expandable_segments) ||
        (plan_cmd->parsed() && plan.step.expandable_segments))
      mg::set_allocator_config("expandable_segments:True");
    return train_cmd->parsed() ? run_train(train) : view_cmd->parsed() ? run_view(view) : run_plan(plan);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return fail(kExitUsage);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return fail(kExitUsage);
  } catch (const mg::OutOfMemoryError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "\n%s: out of memory\n%s\n%s", who.c_str(), e.what(),
                 train_cmd->parsed() ? "Try `memgrad plan` with the same model and step flags and --budget.\n" : "");
    return fail(kExitOutOfMemory);
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", who.c_str(), e.what());
    return fail(kExitError);
  }
}
