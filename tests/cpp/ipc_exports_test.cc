// Device memory and events shared between sessions: handles, reference
// counting, interprocess event waits and hostile handles, on the daemon's
// side (two sessions of one daemon, no stream workers: the tests move the
// exporter's completion counters themselves).
#include "device_daemon/ipc/ipc_exports.h"

#include <cstring>
#include <memory>
#include <string>

#include "data_plane/error_codes.h"
#include "data_plane/ipc_handle.h"
#include "device_daemon/devices/devices.h"
#include "device_daemon/ipc/ipc_event_wait.h"
#include "device_daemon/sessions/session.h"
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
  std::shared_ptr<Session> exporter_;
  std::shared_ptr<Session> importer_;
};

// An interprocess event of `exporter` whose latest record was enqueued at
// `sequence` on stream 0.
uint32_t RecordedEvent(Session& exporter, uint64_t sequence) {
  const uint32_t slot = *exporter.CreateEvent(0, /*enable_timing=*/false,
                                              /*interprocess=*/true);
  exporter.event_slot(slot)->enqueued_position.store(
      PackEventPosition(0, sequence));
  return slot;
}

absl::Status AwaitBriefly(const IpcEventSource& source,
                          const IpcEventPosition& position) {
  return AwaitIpcEvent(source, position, absl::Now() + absl::Milliseconds(20),
                       [] { return false; });
}

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

TEST_F(IpcExportsTest, AnImportedEventWaitsForTheExportersLatestRecord) {
  const uint32_t event = RecordedEvent(*exporter_, 5);
  const std::string handle = *exports_.ExportEvent(exporter_, event);
  EXPECT_EQ(handle.size(), kIpcHandleBytes);
  EXPECT_EQ(*exports_.ExportEvent(exporter_, event), handle);  // same export
  absl::StatusOr<OpenedEvent> opened = exports_.OpenEvent(*importer_, handle);
  ASSERT_TRUE(opened.ok()) << opened.status();
  const IpcEventSource source =
      *importer_->ImportedEventSource(opened->event_slot);
  const IpcEventPosition position = *CaptureIpcEvent(source);
  EXPECT_EQ(position.stream_slot, 0u);
  EXPECT_EQ(position.sequence, 5u);
  EXPECT_EQ(ErrorCodeOf(AwaitBriefly(source, position)), proto::NOT_READY);
  // A later record does not move the captured position.
  exporter_->event_slot(event)->enqueued_position.store(
      PackEventPosition(0, 9));
  exporter_->stream_slot(0)->completed.Advance(5);
  EXPECT_TRUE(AwaitBriefly(source, position).ok());
  EXPECT_EQ(CaptureIpcEvent(source)->sequence, 9u);
  exporter_->stream_slot(0)->completed.Advance(9);
  EXPECT_EQ(CaptureIpcEvent(source)->sequence, 0u);  // done
}

TEST_F(IpcExportsTest, AWaitOnAnExporterThatEndedWithPendingWorkFails) {
  const uint32_t event = RecordedEvent(*exporter_, 3);
  const std::string handle = *exports_.ExportEvent(exporter_, event);
  const uint32_t opened = exports_.OpenEvent(*importer_, handle)->event_slot;
  const IpcEventSource source = *importer_->ImportedEventSource(opened);
  const IpcEventPosition position = *CaptureIpcEvent(source);
  exporter_->Close();
  absl::Status waited = AwaitBriefly(source, position);
  EXPECT_EQ(ErrorCodeOf(waited), proto::INVALID_HANDLE);
  EXPECT_THAT(waited.message(), HasSubstr("ended before the work"));
  EXPECT_THAT(CaptureIpcEvent(source).status().message(),
              HasSubstr("ended before the work"));
  EXPECT_THAT(exports_.OpenEvent(*importer_, handle).status().message(),
              HasSubstr("no such event export"));
}

TEST_F(IpcExportsTest, ADestroyedExportersEventHasNothingPending) {
  const uint32_t event = RecordedEvent(*exporter_, 3);
  const std::string handle = *exports_.ExportEvent(exporter_, event);
  const uint32_t opened = exports_.OpenEvent(*importer_, handle)->event_slot;
  const IpcEventSource source = *importer_->ImportedEventSource(opened);
  ASSERT_TRUE(exporter_->DestroyEvent(event).ok());
  // The slot is reused by another event: the import does not follow it.
  RecordedEvent(*exporter_, 7);
  EXPECT_EQ(CaptureIpcEvent(source)->sequence, 0u);
  EXPECT_FALSE(exports_.OpenEvent(*importer_, handle).ok());
  // Closing the importer's event releases the exporter's session.
  const long before = exporter_.use_count();
  ASSERT_TRUE(importer_->DestroyEvent(opened).ok());
  EXPECT_EQ(exporter_.use_count(), before - 1);
}

TEST_F(IpcExportsTest, HostileEventHandlesAreRefusedWithClearErrors) {
  const uint32_t plain = *exporter_->CreateEvent(0, false);
  EXPECT_THAT(exports_.ExportEvent(exporter_, plain).status().message(),
              HasSubstr("not created as an interprocess event"));
  EXPECT_THAT(exports_.ExportEvent(exporter_, 15).status().message(),
              HasSubstr("does not exist"));
  const uint32_t event = RecordedEvent(*exporter_, 1);
  const std::string handle = *exports_.ExportEvent(exporter_, event);
  auto refusal = [&](Session& importer, const std::string& bytes) {
    absl::StatusOr<OpenedEvent> opened = exports_.OpenEvent(importer, bytes);
    EXPECT_FALSE(opened.ok());
    return std::string(opened.status().message());
  };
  EXPECT_THAT(refusal(*importer_, handle.substr(0, 40)),
              HasSubstr("this one has 40"));
  std::string forged = handle;
  forged[30] ^= 1;
  EXPECT_THAT(refusal(*importer_, forged), HasSubstr("forged"));
  IpcExports other_daemon;
  EXPECT_THAT(refusal(*importer_, *other_daemon.ExportEvent(exporter_, event)),
              HasSubstr("another openreg daemon"));
  EXPECT_THAT(refusal(*exporter_, handle), HasSubstr("exported the event"));
  const uint64_t base = *exporter_->Allocate(0, 64);
  EXPECT_THAT(refusal(*importer_, *exports_.ExportMemory(*exporter_, base)),
              HasSubstr("a memory handle, not an event handle"));
  SessionIdentity stranger;
  stranger.id = 9;
  stranger.peer.uid = exporter_->uid() + 1;
  std::unique_ptr<Session> other_user =
      *Session::Create(stranger, devices_.get(), nullptr, SmallSessionLimits());
  EXPECT_THAT(refusal(*other_user, handle),
              HasSubstr("only processes of that uid"));
  other_user->Close();
  // An exporter whose published stream slot is out of range is reported,
  // not followed.
  const uint32_t opened = exports_.OpenEvent(*importer_, handle)->event_slot;
  exporter_->event_slot(event)->enqueued_position.store(
      PackEventPosition(60000, 1));
  EXPECT_THAT(CaptureIpcEvent(*importer_->ImportedEventSource(opened))
                  .status()
                  .message(),
              HasSubstr("session memory is corrupt"));
  // A local event is not an imported one.
  const uint32_t local = *importer_->CreateEvent(0, false);
  EXPECT_THAT(importer_->ImportedEventSource(local).status().message(),
              HasSubstr("not opened from an IPC handle"));
}

}  // namespace
}  // namespace openreg::daemon
