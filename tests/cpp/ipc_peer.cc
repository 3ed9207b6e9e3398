// A second client process for IPC tests (ipc_runtime_test.cc): opens the
// memory handle given in hex as argv[1] ("-": none), then follows commands
// read from stdin, one per line, answering on stdout:
//   read N       -> the first N bytes at the opened pointer, in hex
//   write TEXT   -> writes TEXT there (synchronously)
//   close        -> IpcCloseMemHandle
//   open_event HEX          -> IpcOpenEventHandle
//   query_event             -> "ready" or "not_ready"
//   sync_event              -> EventSynchronize
//   wait_event_then_read N  -> the default stream waits for the event (on
//                              the device), then reads as `read N`
//   export_pending_event    -> records an interprocess event after work
//                              that hangs until this process ends; prints
//                              the event's handle in hex
// It exits at end of input. The daemon comes from $OPENREG_DAEMON_SOCKET.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "openreg/faults.h"
#include "openreg/runtime.h"

namespace {

using openreg::Error;

// Hangs this process's next memset until the process ends, then records an
// interprocess event after it.
Error ExportPendingEvent(std::string* hex) {
  std::vector<uint32_t> ids;
  Error error = openreg::ArmFaultsFromJson(
      R"({"faults": [{"hang": {"seconds": 0},
                      "trigger": {"kind": "copy"}}]})",
      &ids);
  if (error != Error::kSuccess) return error;
  void* scratch = nullptr;
  if ((error = openreg::Malloc(&scratch, 64)) != Error::kSuccess) return error;
  if ((error = openreg::MemsetAsync(scratch, 0, 64)) != Error::kSuccess) {
    return error;
  }
  openreg::EventId event = 0;
  error = openreg::EventCreate(
      &event, openreg::kEventInterprocess | openreg::kEventDisableTiming);
  if (error != Error::kSuccess) return error;
  if ((error = openreg::EventRecord(event)) != Error::kSuccess) return error;
  openreg::IpcEventHandle handle;
  if ((error = openreg::IpcGetEventHandle(&handle, event)) != Error::kSuccess) {
    return error;
  }
  *hex = absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(handle.bytes), sizeof(handle.bytes)));
  return Error::kSuccess;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* pointer = nullptr;
  if (std::string(argv[1]) != "-") {
    const std::string bytes = absl::HexStringToBytes(argv[1]);
    openreg::IpcMemHandle handle{};
    bytes.copy(reinterpret_cast<char*>(handle.bytes), sizeof(handle.bytes));
    if (openreg::IpcOpenMemHandle(&pointer, handle) != Error::kSuccess) {
      std::cout << "error " << openreg::GetLastErrorMessage() << std::endl;
      return 1;
    }
  }
  std::cout << "opened" << std::endl;
  openreg::EventId event = 0;
  std::string line;
  while (std::getline(std::cin, line)) {
    const std::vector<std::string> words = absl::StrSplit(line, ' ');
    Error error = Error::kSuccess;
    if (words[0] == "read" && words.size() == 2) {
      size_t count = 0;
      if (!absl::SimpleAtoi(words[1], &count)) return 2;
      std::string data(count, '\0');
      error = openreg::Memcpy(data.data(), pointer, count,
                              openreg::MemcpyKind::kDeviceToHost);
      if (error == Error::kSuccess) {
        std::cout << absl::BytesToHexString(data) << std::endl;
      }
    } else if (words[0] == "write" && words.size() == 2) {
      error = openreg::Memcpy(pointer, words[1].data(), words[1].size(),
                              openreg::MemcpyKind::kHostToDevice);
      if (error == Error::kSuccess) std::cout << "written" << std::endl;
    } else if (words[0] == "close") {
      error = openreg::IpcCloseMemHandle(pointer);
      if (error == Error::kSuccess) std::cout << "closed" << std::endl;
    } else if (words[0] == "open_event" && words.size() == 2) {
      const std::string bytes = absl::HexStringToBytes(words[1]);
      openreg::IpcEventHandle handle{};
      bytes.copy(reinterpret_cast<char*>(handle.bytes), sizeof(handle.bytes));
      error = openreg::IpcOpenEventHandle(&event, handle);
      if (error == Error::kSuccess) std::cout << "opened_event" << std::endl;
    } else if (words[0] == "query_event") {
      error = openreg::EventQuery(event);
      if (error == Error::kSuccess) std::cout << "ready" << std::endl;
      if (error == Error::kNotReady) {
        std::cout << "not_ready" << std::endl;
        error = Error::kSuccess;
      }
    } else if (words[0] == "sync_event") {
      error = openreg::EventSynchronize(event);
      if (error == Error::kSuccess) std::cout << "synchronized" << std::endl;
    } else if (words[0] == "wait_event_then_read" && words.size() == 2) {
      size_t count = 0;
      if (!absl::SimpleAtoi(words[1], &count)) return 2;
      error = openreg::StreamWaitEvent(openreg::kDefaultStream, event);
      std::string data(count, '\0');
      if (error == Error::kSuccess) {
        error = openreg::Memcpy(data.data(), pointer, count,
                                openreg::MemcpyKind::kDeviceToHost);
      }
      if (error == Error::kSuccess) {
        std::cout << absl::BytesToHexString(data) << std::endl;
      }
    } else if (words[0] == "export_pending_event") {
      std::string hex;
      error = ExportPendingEvent(&hex);
      if (error == Error::kSuccess) std::cout << hex << std::endl;
    } else {
      return 2;
    }
    if (error != Error::kSuccess) {
      std::cout << "error " << openreg::GetLastErrorMessage() << std::endl;
    }
  }
  return 0;
}
