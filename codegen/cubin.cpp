#include "codegen/cubin.hpp"

#include <elf.h>

#include <cstring>

#include "gmjit/error.hpp"

namespace gmjit::codegen {
namespace {

// .nv.info records: a format byte, an attribute byte, then per format: nothing (EIFMT_NVAL), a
// 16-bit value (EIFMT_HVAL), or a 16-bit size and that many bytes (EIFMT_SVAL). Attribute numbers
// as cuobjdump names them.
constexpr unsigned char kFormatNoValue = 0x01;
constexpr unsigned char kFormatSized = 0x04;
constexpr unsigned char kAttrFrameSize = 0x11;
constexpr unsigned char kAttrRegCount = 0x2f;
// sm_80 and later reserve 1 KiB of every block's shared memory for the system; the cubin's
// .nv.shared.<kernel> section counts it, the driver and ptxas do not. ptxas marks such a cubin
// with a .nv.shared.reserved section, nvJitLink only with the .nv.reservedSmem symbol it refers to.
constexpr std::uint64_t kReservedSharedBytes = 1024;

[[noreturn]] void malformed(const std::string& why) {
  throw Error(ErrorKind::compile, 0, "cannot read the cubin: " + why, "read_cubin_resources", __FILE__, __LINE__);
}

template <typename T>
T read(const std::vector<char>& image, std::uint64_t offset) {
  if (offset + sizeof(T) > image.size()) malformed("truncated");
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace

ResourceUsage read_cubin_resources(const std::vector<char>& cubin, const std::string& lowered_name) {
  const auto header = read<Elf64_Ehdr>(cubin, 0);
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0 || header.e_ident[EI_CLASS] != ELFCLASS64) {
    malformed("not a 64-bit ELF image");
  }
  std::vector<Elf64_Shdr> sections;
  for (unsigned i = 0; i < header.e_shnum; ++i) {
    sections.push_back(read<Elf64_Shdr>(cubin, header.e_shoff + std::uint64_t{i} * header.e_shentsize));
  }
  if (header.e_shstrndx >= sections.size()) malformed("no section names");
  const auto& names = sections[header.e_shstrndx];
  auto section_name = [&](const Elf64_Shdr& s) {
    const std::uint64_t at = names.sh_offset + s.sh_name;
    if (at >= cubin.size()) malformed("section name out of range");
    return std::string(cubin.data() + at, strnlen(cubin.data() + at, cubin.size() - at));
  };

  // The kernel's symbol index, which the global .nv.info attributes refer to.
  std::uint32_t symbol = 0;
  bool have_symbol = false;
  bool reserved_shared = false;
  ResourceUsage usage;
  usage.spills_known = false;
  for (const auto& s : sections) {
    const std::string name = section_name(s);
    if (name == ".nv.shared." + lowered_name) usage.shared_bytes = static_cast<int>(s.sh_size);
    if (name.rfind(".nv.shared.reserved", 0) == 0) reserved_shared = true;
    if (s.sh_type != SHT_SYMTAB) continue;
    const auto& strings = sections.at(s.sh_link);
    for (std::uint64_t off = 0; off + sizeof(Elf64_Sym) <= s.sh_size; off += sizeof(Elf64_Sym)) {
      const auto sym = read<Elf64_Sym>(cubin, s.sh_offset + off);
      const std::uint64_t at = strings.sh_offset + sym.st_name;
      if (at < cubin.size() && std::strncmp(cubin.data() + at, ".nv.reservedSmem", 16) == 0) reserved_shared = true;
      if (at < cubin.size() && lowered_name == cubin.data() + at) {
        symbol = static_cast<std::uint32_t>(off / sizeof(Elf64_Sym));
        have_symbol = true;
      }
    }
  }
  if (!have_symbol) malformed("no kernel '" + lowered_name + "'");
  if (reserved_shared && usage.shared_bytes >= static_cast<int>(kReservedSharedBytes)) {
    usage.shared_bytes -= static_cast<int>(kReservedSharedBytes);
  }
  for (const auto& s : sections) {
    if (section_name(s) != ".nv.info") continue;
    for (std::uint64_t at = s.sh_offset; at + 2 <= s.sh_offset + s.sh_size;) {
      const auto format = read<unsigned char>(cubin, at);
      const auto attribute = read<unsigned char>(cubin, at + 1);
      if (format == kFormatNoValue) {
        at += 2;
        continue;
      }
      if (format != kFormatSized) {
        at += 4;
        continue;
      }
      const auto size = read<std::uint16_t>(cubin, at + 2);
      if (size == 8 && read<std::uint32_t>(cubin, at + 4) == symbol) {
        const auto value = static_cast<int>(read<std::uint32_t>(cubin, at + 8));
        if (attribute == kAttrRegCount) usage.registers = value;
        if (attribute == kAttrFrameSize) usage.stack_bytes = value;
      }
      at += 4 + size;
    }
  }
  if (usage.registers == 0) malformed("no register count for '" + lowered_name + "'");
  return usage;
}

}  // namespace gmjit::codegen
