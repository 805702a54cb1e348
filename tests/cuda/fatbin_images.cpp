// Lists the GPU images in the fat binaries that nvcc embeds in host objects or libraries (the ELF
// section .nv_fatbin): one line per image, "sm_90" for machine code (SASS), "compute_90" for PTX,
// so that a build check needs no cuobjdump (the CUDA toolkit here lacks it).
//   fatbin_images FILE...     (exit 1 when a file has no fat binary or an unreadable one)
// The container, as nvcc 13 writes it (little endian): a 16-byte header (magic 0xBA55ED50, u16
// version, u16 header size, u64 size of the entries), then entries: u16 kind (1 PTX, 2 ELF), u16
// version, u32 header size, u64 payload size, ... u32 architecture at byte 28, then the payload.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

template <class T>
bool read(const std::vector<char>& b, size_t at, T* v) {
  if (at > b.size() || b.size() - at < sizeof(T)) return false;
  std::memcpy(v, b.data() + at, sizeof(T));
  return true;
}

// The bytes of section `name` of a 64-bit little-endian ELF file, or false.
bool section(const std::vector<char>& elf, const char* name, std::vector<char>* out) {
  if (elf.size() < 64 || std::memcmp(elf.data(),
                                     "\x7f"
                                     "ELF\x02\x01",
                                     6) != 0)
    return false;
  uint64_t shoff = 0;
  uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read(elf, 0x28, &shoff) || !read(elf, 0x3a, &shentsize) || !read(elf, 0x3c, &shnum) ||
      !read(elf, 0x3e, &shstrndx) || shstrndx >= shnum)
    return false;
  auto header = [&](uint16_t i, uint32_t* name_at, uint64_t* offset, uint64_t* size) {
    const size_t h = size_t(shoff) + size_t(i) * shentsize;
    return read(elf, h, name_at) && read(elf, h + 0x18, offset) && read(elf, h + 0x20, size);
  };
  uint32_t unused = 0;
  uint64_t strtab = 0, strsize = 0;
  if (!header(shstrndx, &unused, &strtab, &strsize)) return false;
  for (uint16_t i = 0; i < shnum; ++i) {
    uint32_t name_at = 0;
    uint64_t offset = 0, size = 0;
    if (!header(i, &name_at, &offset, &size) || name_at >= strsize) return false;
    const char* n = elf.data() + strtab + name_at;
    if (std::strncmp(n, name, size_t(strsize - name_at)) != 0) continue;
    if (offset > elf.size() || elf.size() - offset < size) return false;
    out->assign(elf.begin() + long(offset), elf.begin() + long(offset + size));
    return true;
  }
  return false;
}

// Prints the images of every container in `fat` (a library's section holds one per object); false if malformed.
bool list(const std::vector<char>& fat) {
  size_t at = 0;
  while (at + 16 <= fat.size()) {
    uint32_t magic = 0;
    uint16_t header = 0;
    uint64_t size = 0;
    read(fat, at, &magic);
    if (magic == 0) {  // padding between containers
      at += 8;
      continue;
    }
    if (magic != 0xBA55ED50u || !read(fat, at + 6, &header) || !read(fat, at + 8, &size)) return false;
    const size_t end = at + header + size_t(size);
    if (end > fat.size()) return false;
    for (size_t e = at + header; e < end;) {
      uint16_t kind = 0;
      uint32_t entry_header = 0, arch = 0;
      uint64_t payload = 0;
      if (!read(fat, e, &kind) || !read(fat, e + 4, &entry_header) || !read(fat, e + 8, &payload) ||
          !read(fat, e + 28, &arch) || entry_header < 32)
        return false;
      if (kind == 1)
        std::printf("compute_%u\n", arch);
      else if (kind == 2)
        std::printf("sm_%u\n", arch);
      else
        std::printf("kind%u_%u\n", kind, arch);
      e += entry_header + size_t(payload);
    }
    at = end;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int rc = 0;
  for (int i = 1; i < argc; ++i) {
    std::ifstream f(argv[i], std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::vector<char> fat;
    if (!f.good() && !f.eof()) {
      std::fprintf(stderr, "%s: cannot be read\n", argv[i]);
      rc = 1;
    } else if (!section(bytes, ".nv_fatbin", &fat)) {
      std::fprintf(stderr, "%s: no .nv_fatbin section (not an object nvcc compiled?)\n", argv[i]);
      rc = 1;
    } else if (!list(fat)) {
      std::fprintf(stderr, "%s: the fat binary is not in the layout this reader knows\n", argv[i]);
      rc = 1;
    }
  }
  return rc;
}
