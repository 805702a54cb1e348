#include <memgrad/nn/safetensors.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include <memgrad/core/files.h>
#include <memgrad/core/grad_mode.h>
#include <memgrad/ops/ops.h>

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
    case kUInt8:
      return "U8";
    case kInt8:
      return "I8";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* t) {
  for (DType d : {kFloat32, kFloat16, kBFloat16, kFloat64, kInt32, kInt64, kBool, kUInt8, kInt8})
    if (s == format_name(d)) return *t = d, true;
  return false;
}

// The reference implementation's limit: a larger header is not a safetensors file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Parses the header, refusing a key that appears twice in one object (nlohmann::json would keep
// the last silently) and nesting deeper than the format has (a tensor's shape is at depth 3).
nlohmann::json parse_header(const std::string& text, const std::string& where) {
  std::vector<std::set<std::string>> keys;  // one set per object being parsed
  auto check = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    MG_CHECK(depth <= 8, IOError, where, " has a corrupted header: nested deeper than 8 levels");
    if (event == E::object_start) keys.emplace_back();
    if (event == E::object_end) keys.pop_back();
    if (event == E::key)
      MG_CHECK(keys.back().insert(parsed.get<std::string>()).second, IOError, where,
               " has a corrupted header: the key '", parsed.get<std::string>(), "' appears twice in one object");
    return true;
  };
  return nlohmann::json::parse(text, check);
}

}  // namespace

namespace {

std::string errno_text() { return std::strerror(errno); }

// Exactly n bytes at `offset`: an IOError naming the file and the offset on an error or a short read
// (a file that shrank, or one whose size fstat does not know).
void read_all(int fd, void* data, size_t n, uint64_t offset, const std::string& where) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::pread(fd, p, std::min<size_t>(n, size_t(1) << 30), off_t(offset));
    if (r < 0 && errno == EINTR) continue;
    MG_CHECK(r >= 0, IOError, where, ": reading at offset ", offset, " failed: ", errno_text());
    MG_CHECK(r > 0, IOError, where, ": the file ends at offset ", offset, ", ", n, " bytes short of what it declares");
    p += r, n -= size_t(r), offset += uint64_t(r);
  }
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

  // Durable and atomic (core/files.h): a temporary file beside the final one, synced, renamed over
  // it (a symbolic link followed, a special file refused), then the folder synced.
  AtomicFile f(path, "save_safetensors");
  f.write(len, 8);
  f.write(text);
  for (auto& h : host) f.write(h.raw_data(), h.nbytes());
  f.commit();
}

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  const std::string where = "load_safetensors: '" + path + "'";
  // Only a regular file is opened, without blocking on a FIFO (core/files.h).
  const InputFile f(path, "load_safetensors");
  const uint64_t size = uint64_t(f.size());
  MG_CHECK(size >= 8, IOError, where, " is truncated: expected at least an 8-byte header length, got ", size, " bytes");
  unsigned char len[8];
  read_all(f.fd(), len, 8, 0, where);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  MG_CHECK(n <= size - 8, IOError, where, " is truncated or corrupted: the header claims ", n, " bytes, but only ",
           size - 8, " follow");
  MG_CHECK(n <= kMaxHeaderBytes, IOError, where, " has a header of ", n, " bytes, more than the format's limit of ",
           kMaxHeaderBytes);
  std::string text(n, '\0');
  read_all(f.fd(), text.data(), n, 8, where);
  nlohmann::json header;
  try {
    header = parse_header(text, where);
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
             ": unsupported dtype ", v["dtype"].dump(), " (expected F32, F16, BF16, F64, I32, I64, I8, U8 or BOOL)");
    MG_CHECK(v["shape"].is_array(), IOError, what, ": expected the shape as an array");
    for (auto& d : v["shape"]) {
      MG_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), IOError, what,
               ": expected sizes that are integers in [0, 2^63 - 1], got ", v["shape"].dump());
      e.shape.push_back(int64_t(d.get<uint64_t>()));
    }
    size_t bytes = 0;
    try {
      bytes = nbytes_of(e.shape, e.dtype);
    } catch (const ShapeError& err) {
      throw IOError(detail::str(what, ": ", err.what()));
    }
    auto& off = v["data_offsets"];
    MG_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), IOError,
             what, ": expected data_offsets [begin, end]");
    e.begin = off[0].get<uint64_t>(), e.end = off[1].get<uint64_t>();
    MG_CHECK(e.begin <= e.end && e.end <= data_size, IOError, what, ": data_offsets [", e.begin, ", ", e.end,
             "] lie outside the ", data_size, " data bytes (truncated file?)");
    MG_CHECK(e.end - e.begin == bytes, IOError, what, ": expected ", bytes, " bytes for shape ", v["shape"].dump(),
             " of ", v["dtype"].get<std::string>(), ", got ", e.end - e.begin);
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
    read_all(f.fd(), t.raw_data(), e.end - e.begin, 8 + n + e.begin, where + " entry '" + e.name + "'");
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
