#pragma once
// A word as a POSIX shell reads it back unchanged: text a user pastes into a script or sources (`export
// K=V`, an argument list) must not expand `$(...)`, split at spaces or end a quote early.
#include <string>
#include <vector>

namespace infrarsi {

// Bare when the word has only characters no shell treats specially, else in single quotes ('it'\''s').
std::string shell_quote(const std::string& word);
// The words quoted, separated by spaces.
std::string shell_join(const std::vector<std::string>& words);

} // namespace infrarsi
