// Build-ids decide whether a launch index's plans were computed by this library build, and pin
// NVRTC in every compile key.
#include <gtest/gtest.h>
#include <nvrtc.h>

#include "core/build_id.hpp"

namespace gmjit::detail {
namespace {

int in_this_binary() { return 7; }

TEST(BuildId, TheLibrarysIsItsBinarysAndOthersDiffer) {
  const std::string& id = library_build_id();
  ASSERT_FALSE(id.empty()) << "the build links with a GNU build-id";
  EXPECT_EQ(id.size() % 2, 0u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  // The library's code is linked into this test binary: the same object as this function's.
  const LoadedObject self = loaded_object_of(reinterpret_cast<const void*>(&in_this_binary));
  EXPECT_TRUE(self.found);
  EXPECT_EQ(self.build_id, id);
  const LoadedObject nvrtc = loaded_object_of(reinterpret_cast<const void*>(&nvrtcVersion));
  EXPECT_TRUE(nvrtc.found);
  EXPECT_NE(nvrtc.path.find("nvrtc"), std::string::npos) << nvrtc.path;
  EXPECT_NE(nvrtc.build_id, id);
  EXPECT_FALSE(loaded_object_of(nullptr).found);
}

}  // namespace
}  // namespace gmjit::detail
