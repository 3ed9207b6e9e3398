#include "command_line/help_flag.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "absl/flags/commandlineflag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace openreg::command_line {
namespace {

bool DefinedIn(const absl::CommandLineFlag& flag,
               const std::vector<std::string>& flag_sources) {
  const std::string file = flag.Filename();
  return std::any_of(flag_sources.begin(), flag_sources.end(),
                     [&](const std::string& source) {
                       return absl::StartsWith(file, source);
                     });
}

// A string flag's default is shown quoted, so that an empty default reads
// as one; an empty list reads "none".
std::string ShownDefault(const absl::CommandLineFlag& flag) {
  if (flag.IsOfType<std::string>()) {
    return absl::StrCat("\"", flag.DefaultValue(), "\"");
  }
  const std::string value = flag.DefaultValue();
  return value.empty() ? "none" : value;
}

// `text` wrapped at word boundaries into lines of at most kWidth columns,
// each indented by kIndent.
std::string Wrapped(absl::string_view text) {
  constexpr size_t kWidth = 78;
  constexpr absl::string_view kIndent = "      ";
  std::string out;
  size_t column = 0;
  for (absl::string_view word :
       absl::StrSplit(text, absl::ByAnyChar(" \n"), absl::SkipEmpty())) {
    if (column > 0 && column + 1 + word.size() > kWidth) {
      out += "\n";
      column = 0;
    }
    if (column == 0) {
      absl::StrAppend(&out, kIndent, word);
      column = kIndent.size() + word.size();
    } else {
      absl::StrAppend(&out, " ", word);
      column += 1 + word.size();
    }
  }
  return out;
}

}  // namespace

std::string HelpText(const std::vector<std::string>& flag_sources) {
  std::vector<const absl::CommandLineFlag*> flags;
  for (const auto& [name, flag] : absl::GetAllFlags()) {
    if (!flag->IsRetired() && DefinedIn(*flag, flag_sources)) {
      flags.push_back(flag);
    }
  }
  std::sort(flags.begin(), flags.end(),
            [](const auto* a, const auto* b) { return a->Name() < b->Name(); });
  std::string text = absl::StrCat(absl::ProgramUsageMessage(), "\n\nFlags:\n");
  for (const absl::CommandLineFlag* flag : flags) {
    absl::StrAppend(&text, "  --", flag->Name(),
                    " (default: ", ShownDefault(*flag), ")\n",
                    Wrapped(flag->Help()), "\n");
  }
  absl::StrAppend(&text,
                  "\n--helpfull lists every flag, Abseil's and gRPC's too.\n");
  return text;
}

void ExitIfHelpRequested(int argc, char** argv,
                         const std::vector<std::string>& flag_sources,
                         std::ostream& out) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return;
    if (std::strcmp(argv[i], "--help") == 0 ||
        std::strcmp(argv[i], "-help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      out << HelpText(flag_sources);
      out.flush();
      std::exit(0);
    }
  }
}

}  // namespace openreg::command_line
