// The safetensors format (Hugging Face): an 8-byte little-endian header length, a JSON header
// {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}}
// padded with spaces to 8 bytes, then the raw little-endian bytes of every tensor.
// dtypes: F32 F16 BF16 F64 I32 I64 BOOL. Files move weights between memgrad and PyTorch.
#pragma once
#include <map>
#include <string>

#include <memgrad/nn/module.h>

namespace mg::nn {

using Metadata = std::map<std::string, std::string>;

// Writes `tensors` (any device; copied to the host) atomically and durably: to `path`.tmp.<pid> in
// the same folder, fsynced, renamed over `path`, then the folder fsynced. Temporary files of the
// same name left by processes that died mid-save are removed first. Raises IOError when the file
// cannot be written (the temporary file is then removed).
void save_safetensors(const StateDict& tensors, const std::string& path, const Metadata& metadata = {});
// Reads and validates a whole file (header, dtypes, shapes, offsets covering the data exactly)
// before returning anything; tensors are new cpu tensors. Raises IOError naming the file and what is
// wrong: not a regular file (a directory, FIFO or device), a short read (with its offset), a header
// that is not JSON or repeats a key, a shape whose size overflows, offsets that do not tile the data.
StateDict load_safetensors(const std::string& path, Metadata* metadata = nullptr);

// A module's state_dict to and from a file. load validates the file and every name, shape and
// dtype before copying, so a bad file leaves the module unchanged.
void save(const Module& module, const std::string& path, const Metadata& metadata = {});
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace mg::nn
