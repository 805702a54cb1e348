#include <memgrad/nn/safetensors.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <vector>

#include <memgrad/core/grad_mode.h>
#include <memgrad/core/ops.h>

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors I/O assumes a little-endian host");

namespace mg::nn {

namespace {

const char* format_name(DType t) {
  switch (t) {
    case kFloat32:
      return "F32";
    case kFloat16:
      return "F16";
    case kBFloat16:
      return "BF16";
    case kFloat64:
      return "F64";
    case kInt32:
      return "I32";
    case kInt64:
      return "I64";
    case kBool:
      return "BOOL";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* t) {
  for (DType d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool})
    if (s == format_name(d)) return *t = d, true;
  return false;
}

}  // namespace

void save_safetensors(const StateDict& tensors, const std::string& path, const Metadata& metadata) {
  NoGradGuard ng;
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (auto& [name, t] : tensors) {
    MG_CHECK(name != "__metadata__", ValueError, "save_safetensors: '__metadata__' is reserved, not a tensor name");
    MG_CHECK(t.defined(), ValueError, "save_safetensors: '", name, "' is an undefined tensor");
    MG_CHECK(!t.is_meta(), MetaTensorError, "save_safetensors: '", name, "' is a meta tensor and has no values");
    Tensor h = t.to(kCPU).contiguous();
    header[name] = {
        {"dtype", format_name(h.dtype())}, {"shape", h.shape()}, {"data_offsets", {offset, offset + h.nbytes()}}};
    offset += h.nbytes();
    host.push_back(h);
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  uint64_t n = text.size();
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));

  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    MG_CHECK(f.good(), IOError, "save_safetensors: cannot open '", tmp, "' for writing: ", std::strerror(errno));
    f.write(reinterpret_cast<const char*>(len), 8);
    f.write(text.data(), std::streamsize(text.size()));
    for (auto& h : host) f.write(static_cast<const char*>(h.raw_data()), std::streamsize(h.nbytes()));
    f.flush();
    if (!f.good()) {
      f.close();
      std::remove(tmp.c_str());
      throw IOError(detail::str("save_safetensors: writing '", tmp, "' failed (disk full?)"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw IOError(detail::str("save_safetensors: cannot rename '", tmp, "' to '", path, "': ", std::strerror(err)));
  }
}

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  const std::string where = "load_safetensors: '" + path + "'";
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  MG_CHECK(f.good(), IOError, where, " cannot be opened: ", std::strerror(errno));
  const uint64_t size = uint64_t(f.tellg());
  MG_CHECK(size >= 8, IOError, where, " is truncated: expected at least an 8-byte header length, got ", size, " bytes");
  f.seekg(0);
  unsigned char len[8];
  f.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  MG_CHECK(n <= size - 8, IOError, where, " is truncated or corrupted: the header claims ", n, " bytes, but only ",
           size - 8, " follow");
  std::string text(n, '\0');
  f.read(text.data(), std::streamsize(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw IOError(where + " has a corrupted header (not JSON): " + e.what());
  }
  MG_CHECK(header.is_object(), IOError, where, " has a corrupted header: expected a JSON object");
  const uint64_t data_size = size - 8 - n;

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  Metadata meta;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      MG_CHECK(v.is_object(), IOError, where, ": expected __metadata__ to map strings to strings");
      for (auto& [k, s] : v.items()) {
        MG_CHECK(s.is_string(), IOError, where, ": expected __metadata__ to map strings to strings");
        meta[k] = s.get<std::string>();
      }
      continue;
    }
    const std::string what = where + " entry '" + name + "'";
    MG_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), IOError, what,
             ": expected an object with dtype, shape and data_offsets");
    Entry e{name, kFloat32, {}, 0, 0};
    MG_CHECK(v["dtype"].is_string() && parse_dtype(v["dtype"].get<std::string>(), &e.dtype), IOError, what,
             ": unsupported dtype ", v["dtype"].dump(), " (expected F32, F16, BF16, F64, I32, I64 or BOOL)");
    MG_CHECK(v["shape"].is_array(), IOError, what, ": expected the shape as an array");
    uint64_t numel = 1;
    for (auto& d : v["shape"]) {
      MG_CHECK(d.is_number_unsigned(), IOError, what, ": expected non-negative integer sizes, got ", v["shape"].dump());
      uint64_t s = d.get<uint64_t>();
      MG_CHECK(s == 0 || numel <= data_size / s, IOError, what, ": shape ", v["shape"].dump(),
               " is larger than the file's data (", data_size, " bytes)");
      numel *= s;
      e.shape.push_back(int64_t(s));
    }
    auto& off = v["data_offsets"];
    MG_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), IOError,
             what, ": expected data_offsets [begin, end]");
    e.begin = off[0].get<uint64_t>(), e.end = off[1].get<uint64_t>();
    MG_CHECK(e.begin <= e.end && e.end <= data_size, IOError, what, ": data_offsets [", e.begin, ", ", e.end,
             "] lie outside the ", data_size, " data bytes (truncated file?)");
    MG_CHECK(e.end - e.begin == numel * dtype_size(e.dtype), IOError, what, ": expected ", numel * dtype_size(e.dtype),
             " bytes for shape ", v["shape"].dump(), " of ", v["dtype"].get<std::string>(), ", got ", e.end - e.begin);
    entries.push_back(std::move(e));
  }
  // The tensors must tile the data exactly: no gaps, no overlaps, nothing left over.
  std::vector<const Entry*> order;
  for (auto& e : entries) order.push_back(&e);
  std::sort(order.begin(), order.end(),
            [](auto* a, auto* b) { return a->begin != b->begin ? a->begin < b->begin : a->end < b->end; });
  uint64_t at = 0;
  for (auto* e : order) {
    MG_CHECK(e->begin == at, IOError, where, " is corrupted: entry '", e->name, "' starts at byte ", e->begin,
             ", expected ", at, " (tensors overlap or leave a gap)");
    at = e->end;
  }
  MG_CHECK(at == data_size, IOError, where, " is corrupted: the tensors cover ", at, " bytes of ", data_size,
           " data bytes");

  StateDict out;
  for (auto& e : entries) {
    Tensor t = empty(e.shape, e.dtype);
    f.seekg(std::streamoff(8 + n + e.begin));
    f.read(static_cast<char*>(t.raw_data()), std::streamsize(e.end - e.begin));
    MG_CHECK(f.good(), IOError, where, ": reading entry '", e.name, "' failed");
    if (e.dtype == kBool) {  // any non-zero byte is true; store canonical 0/1
      auto* p = static_cast<unsigned char*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) p[i] = p[i] != 0;
    }
    out[e.name] = t;
  }
  if (metadata) *metadata = std::move(meta);
  return out;
}

void save(const Module& module, const std::string& path, const Metadata& metadata) {
  save_safetensors(module.state_dict(), path, metadata);
}

void load(Module& module, const std::string& path, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace mg::nn
