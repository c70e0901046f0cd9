#include "core/build_id.hpp"

#include <elf.h>
#include <link.h>

#include <cstring>

namespace gmjit::detail {
namespace {

struct Search {
  ElfW(Addr) address = 0;
  LoadedObject object;
};

std::string hex(const unsigned char* bytes, std::size_t n) {
  static const char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    out += digits[bytes[i] >> 4];
    out += digits[bytes[i] & 15];
  }
  return out;
}

// Notes are 4-byte aligned records: header, name, descriptor.
std::string build_id_in(const char* notes, std::size_t size) {
  std::size_t at = 0;
  while (at + sizeof(ElfW(Nhdr)) <= size) {
    ElfW(Nhdr) note;
    std::memcpy(&note, notes + at, sizeof(note));
    const std::size_t name_at = at + sizeof(note);
    const std::size_t desc_at = name_at + ((note.n_namesz + 3) & ~std::size_t{3});
    const std::size_t next = desc_at + ((note.n_descsz + 3) & ~std::size_t{3});
    if (next > size) break;
    if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 && std::memcmp(notes + name_at, "GNU", 4) == 0) {
      return hex(reinterpret_cast<const unsigned char*>(notes + desc_at), note.n_descsz);
    }
    at = next;
  }
  return {};
}

bool contains(const dl_phdr_info& info, ElfW(Addr) address) {
  for (int i = 0; i < info.dlpi_phnum; ++i) {
    const ElfW(Phdr)& segment = info.dlpi_phdr[i];
    const ElfW(Addr) start = info.dlpi_addr + segment.p_vaddr;
    if (segment.p_type == PT_LOAD && address >= start && address - start < segment.p_memsz) return true;
  }
  return false;
}

int visit(dl_phdr_info* info, std::size_t, void* data) {
  auto* search = static_cast<Search*>(data);
  if (!contains(*info, search->address)) return 0;
  search->object.found = true;
  search->object.path = info->dlpi_name != nullptr ? info->dlpi_name : "";
  for (int i = 0; i < info->dlpi_phnum && search->object.build_id.empty(); ++i) {
    const ElfW(Phdr)& segment = info->dlpi_phdr[i];
    if (segment.p_type != PT_NOTE) continue;
    search->object.build_id =
        build_id_in(reinterpret_cast<const char*>(info->dlpi_addr + segment.p_vaddr), segment.p_memsz);
  }
  return 1;
}

}  // namespace

LoadedObject loaded_object_of(const void* address) {
  Search search;
  search.address = reinterpret_cast<ElfW(Addr)>(address);
  ::dl_iterate_phdr(visit, &search);
  return search.object;
}

const std::string& library_build_id() {
  static const std::string id = loaded_object_of(reinterpret_cast<const void*>(&library_build_id)).build_id;
  return id;
}

}  // namespace gmjit::detail
