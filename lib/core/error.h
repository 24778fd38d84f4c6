#pragma once
// Errors carry the offending values. Library code throws; only app/ maps them to exit
// codes: InputError (bad data, config or usage) -> 2, everything else -> 1.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace xmc {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The user's input is wrong: a data file, a config value, a command-line argument.
class InputError : public Error {
 public:
  using Error::Error;
};

// A location in a text file, for messages: "file:line:column".
struct SourceLocation {
  std::string file;
  long long line = 0;    // 1-based, 0 = unknown
  long long column = 0;  // 1-based, 0 = unknown
  std::string str() const {
    if (line <= 0) return file;
    if (column <= 0) return fmt::format("{}:{}", file, line);
    return fmt::format("{}:{}:{}", file, line, column);
  }
};

template <class... Args>
[[noreturn]] void throw_input(fmt::format_string<Args...> f, Args&&... args) {
  throw InputError(fmt::format(f, std::forward<Args>(args)...));
}

template <class... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

// XMC_CHECK(cond, fmt, args...): internal invariant or shape check; throws xmc::Error
// with the condition text, file and line.
#define XMC_CHECK(cond, ...)                                                            \
  do {                                                                                  \
    if (!(cond))                                                                        \
      throw ::xmc::Error(::fmt::format("{}:{}: check '{}' failed: {}", __FILE__,         \
                                       __LINE__, #cond, ::fmt::format(__VA_ARGS__)));   \
  } while (0)

}  // namespace xmc
