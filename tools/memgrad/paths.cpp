#include "paths.h"

#include <sys/stat.h>

#include <climits>
#include <cstdlib>
#include <vector>

namespace memgrad_cli {

namespace {

// One file, however it is named: its device and inode when it exists, else its folder's real path and
// its name.
std::string identity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) return std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  char real[PATH_MAX];
  return std::string(::realpath(dir.c_str(), real) ? real : dir.c_str()) + "/" + path.substr(slash + 1);
}

struct Use {
  const char* flag;
  std::string path, id;
};

}  // namespace

void check_run_files(const TrainFlags& f) {
  std::vector<Use> outputs, inputs;
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--save", f.save},
                                   {"--log", f.log},
                                   {"--timeline", f.timeline},
                                   {"--snapshot", f.snapshot}})
    if (!path.empty()) {
      check_writable(flag, path);
      outputs.push_back({flag, path, identity(mg::output_file(path, flag))});
    }
  if (!f.resume.empty()) inputs.push_back({"--resume", f.resume, identity(f.resume)});
  if (!f.plan.empty() && f.plan != "mixed") inputs.push_back({"--plan", f.plan, identity(f.plan)});
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string&>{"--data", f.data.data}, {"--val-data", f.data.val_data}})
    if (!path.empty()) try {
        for (const std::string& file : mg::data::Tokens::files_of(path)) inputs.push_back({flag, file, identity(file)});
      } catch (const mg::Error&) {  // said when the data is opened, with the flag
      }
  for (size_t i = 0; i < outputs.size(); ++i) {
    for (size_t j = 0; j < i; ++j)
      if (outputs[j].id == outputs[i].id)
        throw UsageError(std::string(outputs[i].flag) + " " + outputs[i].path + " and " + outputs[j].flag + " " +
                         outputs[j].path + " are one file: each output needs its own");
    for (const Use& in : inputs)
      if (in.id == outputs[i].id && !(std::string(in.flag) == "--resume" && std::string(outputs[i].flag) == "--save"))
        throw UsageError(std::string(outputs[i].flag) + " " + outputs[i].path + " is " + in.flag + " " + in.path +
                         ", a file this run reads: writing it would replace or cut it while it is read");
  }
}

void check_not_input(const std::string& out_flag, const std::string& out, const std::string& in_flag,
                     const std::string& in) {
  if (identity(mg::output_file(out, out_flag)) == identity(in))
    throw UsageError(out_flag + " " + out + " is " + in_flag + " " + in +
                     ", a file this command reads: writing it would replace it");
}

void check_apart(const std::string& flag_a, const std::string& a, const std::string& flag_b, const std::string& b) {
  if (identity(mg::output_file(a, flag_a)) == identity(mg::output_file(b, flag_b)))
    throw UsageError(flag_a + " " + a + " and " + flag_b + " " + b + " are one file: each output needs its own");
}

}  // namespace memgrad_cli
