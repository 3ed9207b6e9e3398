// Device memory shared between sessions: handles, reference counting and
// hostile handles, on the daemon's side (two sessions of one daemon).
#include "device_daemon/ipc_exports.h"

#include <cstring>
#include <memory>
#include <string>

#include "data_plane/error_codes.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/devices.h"
#include "device_daemon/session.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cpp/test_sessions.h"

namespace openreg::daemon {
namespace {

using ::testing::HasSubstr;

class IpcExportsTest : public ::testing::Test {
 protected:
  IpcExportsTest() {
    devices_ = *Devices::Create(2, 16 << 20);
    exporter_ = MakeTestSession(1, devices_.get(), nullptr);
    importer_ = MakeTestSession(2, devices_.get(), nullptr);
  }
  ~IpcExportsTest() override {
    importer_->Close();
    exporter_->Close();
  }

  void Write(Session& session, uint64_t address, const std::string& text) {
    absl::StatusOr<PinnedRange> range = session.PinRange(address, text.size());
    ASSERT_TRUE(range.ok()) << range.status();
    std::memcpy(range->data, text.data(), text.size());
  }
  std::string Read(Session& session, uint64_t address, size_t size) {
    absl::StatusOr<PinnedRange> range = session.PinRange(address, size);
    EXPECT_TRUE(range.ok()) << range.status();
    return range.ok() ? std::string(range->data, size) : "";
  }

  std::unique_ptr<Devices> devices_;
  IpcExports exports_;
  std::unique_ptr<Session> exporter_;
  std::unique_ptr<Session> importer_;
};

TEST_F(IpcExportsTest, AnImporterSeesTheExportersMemoryAtTheHandlesOffset) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  Write(*exporter_, base + 100, "shared");
  absl::StatusOr<std::string> handle =
      exports_.ExportMemory(*exporter_, base + 100);
  ASSERT_TRUE(handle.ok()) << handle.status();
  EXPECT_EQ(handle->size(), kIpcHandleBytes);
  absl::StatusOr<OpenedMemory> opened =
      exports_.OpenMemory(*importer_, *handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ(opened->address, base + 100);
  EXPECT_EQ(opened->size, 4096u - 100);
  EXPECT_EQ(Read(*importer_, opened->address, 6), "shared");
  // True sharing: later writes on either side are seen by the other.
  Write(*importer_, opened->address, "SHARED");
  EXPECT_EQ(Read(*exporter_, base + 100, 6), "SHARED");
  EXPECT_EQ(importer_->imported_bytes(), 4096u);
  EXPECT_EQ(importer_->allocated_bytes(), 0u);
}

TEST_F(IpcExportsTest, MemoryLivesUntilTheExporterFreesAndEveryImporterCloses) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  Write(*exporter_, base, "alive");
  const std::string handle = *exports_.ExportMemory(*exporter_, base);
  const uint64_t opened = exports_.OpenMemory(*importer_, handle)->address;
  const uint64_t before = devices_->arena(0).Stats().allocated_bytes;
  ASSERT_TRUE(exporter_->Free(base).ok());
  // The importer still reads it, and may open the handle again.
  EXPECT_EQ(Read(*importer_, opened, 5), "alive");
  EXPECT_TRUE(exports_.OpenMemory(*importer_, handle).ok());
  EXPECT_EQ(devices_->arena(0).Stats().allocated_bytes, before);
  ASSERT_TRUE(importer_->CloseImported(opened).ok());
  EXPECT_EQ(Read(*importer_, opened, 5), "alive");  // one open left
  ASSERT_TRUE(importer_->CloseImported(opened).ok());
  EXPECT_LT(devices_->arena(0).Stats().allocated_bytes, before);
  EXPECT_FALSE(importer_->PinRange(opened, 1).ok());
  absl::StatusOr<OpenedMemory> late = exports_.OpenMemory(*importer_, handle);
  EXPECT_EQ(ErrorCodeOf(late.status()), proto::INVALID_HANDLE);
  EXPECT_THAT(std::string(late.status().message()), HasSubstr("was freed"));
}

TEST_F(IpcExportsTest, AnImporterThatEndsReleasesOnlyItsReferences) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  Write(*exporter_, base, "kept");
  const std::string handle = *exports_.ExportMemory(*exporter_, base);
  ASSERT_TRUE(exports_.OpenMemory(*importer_, handle).ok());
  importer_->Close();  // a crash ends the session the same way
  EXPECT_EQ(Read(*exporter_, base, 4), "kept");
  EXPECT_TRUE(exporter_->Free(base).ok());
}

TEST_F(IpcExportsTest, ImportedMemoryIsClosedNotFreedAndNotReExported) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  const std::string handle = *exports_.ExportMemory(*exporter_, base);
  const uint64_t opened = exports_.OpenMemory(*importer_, handle)->address;
  absl::Status freed = importer_->Free(opened);
  EXPECT_THAT(std::string(freed.message()), HasSubstr("IpcCloseMemHandle"));
  EXPECT_FALSE(exports_.ExportMemory(*importer_, opened).ok());
  EXPECT_FALSE(exports_.OpenMemory(*exporter_, handle).ok());  // its own
  EXPECT_TRUE(importer_->CloseImported(opened).ok());
  EXPECT_FALSE(importer_->CloseImported(opened).ok());  // closed twice
}

TEST_F(IpcExportsTest, HostileHandlesAreRefusedWithClearErrors) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  const std::string handle = *exports_.ExportMemory(*exporter_, base);
  auto refusal = [&](const std::string& bytes) {
    absl::StatusOr<OpenedMemory> opened =
        exports_.OpenMemory(*importer_, bytes);
    EXPECT_FALSE(opened.ok());
    return std::string(opened.status().message());
  };
  EXPECT_THAT(refusal(handle.substr(0, 40)), HasSubstr("this one has 40"));
  EXPECT_THAT(refusal(std::string(64, 'x')), HasSubstr("not an openreg"));
  std::string forged = handle;
  forged[30] ^= 1;  // the secret
  EXPECT_THAT(refusal(forged), HasSubstr("forged"));
  std::string other_export = handle;
  other_export[16] ^= 7;  // the export id
  EXPECT_THAT(refusal(other_export), HasSubstr("no such export"));
  IpcExports other_daemon;
  const uint64_t theirs = *exporter_->Allocate(1, 64);
  EXPECT_THAT(refusal(*other_daemon.ExportMemory(*exporter_, theirs)),
              HasSubstr("another openreg daemon"));
  std::string padded = handle;
  padded[60] = 1;
  EXPECT_THAT(refusal(padded), HasSubstr("nonzero padding"));
  IpcHandle event = *DecodeIpcHandle(handle, IpcHandleKind::kMemory);
  event.kind = IpcHandleKind::kEvent;
  EXPECT_THAT(refusal(EncodeIpcHandle(event)), HasSubstr("event handle"));
}

TEST_F(IpcExportsTest, ExportingTheSameAllocationGivesTheSameExport) {
  const uint64_t base = *exporter_->Allocate(0, 4096);
  const IpcHandle first = *DecodeIpcHandle(
      *exports_.ExportMemory(*exporter_, base), IpcHandleKind::kMemory);
  const IpcHandle second = *DecodeIpcHandle(
      *exports_.ExportMemory(*exporter_, base + 512), IpcHandleKind::kMemory);
  EXPECT_EQ(first.export_id, second.export_id);
  EXPECT_EQ(first.secret, second.secret);
  EXPECT_EQ(second.offset, 512u);
  EXPECT_EQ(exports_.Stats().size(), 1u);
  EXPECT_FALSE(exports_.ExportMemory(*exporter_, base + 8192).ok());
}

}  // namespace
}  // namespace openreg::daemon
