#pragma once
// What a person needs from a failed build's output: the compiler's (or linker's) first error, with the
// source line and caret it printed under it, rather than the last lines, which are make's `Error 2` lines of
// every directory it recursed through. For people (a trial's detail); nothing decides on it.
#include <optional>
#include <string>

namespace infrarsi::patch {

// The first error a compiler, assembler or linker printed in `log` (GCC's and Clang's `file:line:col:
// error: ...` and `fatal error:`, `error: ...` and `error[E...]` at a line's start, a linker's `undefined
// reference`), with up to two following lines that belong to it (GCC's and Clang's source line and caret);
// else make's own first complaint (`make: *** No rule to make target ...`), never its `Error N` lines.
// nullopt when the log holds neither.
std::optional<std::string> first_build_error(const std::string& log);

} // namespace infrarsi::patch
