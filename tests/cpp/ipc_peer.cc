// A second client process for IPC tests (ipc_runtime_test.cc): opens the
// memory handle given in hex as argv[1], then follows commands read from
// stdin, one per line, answering on stdout:
//   read N       -> the first N bytes at the opened pointer, in hex
//   write TEXT   -> writes TEXT there (synchronously)
//   close        -> IpcCloseMemHandle
// It exits at end of input. The daemon comes from $OPENREG_DAEMON_SOCKET.
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "openreg/runtime.h"

int main(int argc, char** argv) {
  using openreg::Error;
  if (argc != 2) return 2;
  const std::string bytes = absl::HexStringToBytes(argv[1]);
  openreg::IpcMemHandle handle{};
  bytes.copy(reinterpret_cast<char*>(handle.bytes), sizeof(handle.bytes));
  void* pointer = nullptr;
  if (openreg::IpcOpenMemHandle(&pointer, handle) != Error::kSuccess) {
    std::cout << "error " << openreg::GetLastErrorMessage() << std::endl;
    return 1;
  }
  std::cout << "opened" << std::endl;
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
    } else {
      return 2;
    }
    if (error != Error::kSuccess) {
      std::cout << "error " << openreg::GetLastErrorMessage() << std::endl;
    }
  }
  return 0;
}
