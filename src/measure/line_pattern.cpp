#include "measure/line_pattern.hpp"

#include "util/error.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>

namespace infrarsi::measure {

struct LinePattern::Impl {
    pcre2_code* code = nullptr;
    pcre2_match_context* context = nullptr;
    std::vector<std::pair<std::string, int>> groups; // name, group number
    ~Impl() {
        pcre2_match_context_free(context);
        pcre2_code_free(code);
    }
};

LinePattern::LinePattern(const std::string& pattern) : pattern_(pattern), impl_(std::make_unique<Impl>()) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), 0, &error,
                                &offset, nullptr);
    if (!impl_->code) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof message);
        throw Error(std::string("the pattern does not compile: ") + reinterpret_cast<const char*>(message) +
                        " at offset " + std::to_string(offset),
                    pattern, "a PCRE2 regular expression with named groups, (?<name>...)");
    }
    pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE); // faster where the JIT exists; fine without
    impl_->context = pcre2_match_context_create(nullptr);
    pcre2_set_match_limit(impl_->context, 200000);
    pcre2_set_depth_limit(impl_->context, 2000);

    uint32_t count = 0, entry_size = 0;
    PCRE2_SPTR table = nullptr;
    pcre2_pattern_info(impl_->code, PCRE2_INFO_NAMECOUNT, &count);
    pcre2_pattern_info(impl_->code, PCRE2_INFO_NAMEENTRYSIZE, &entry_size);
    pcre2_pattern_info(impl_->code, PCRE2_INFO_NAMETABLE, &table);
    for (uint32_t i = 0; i < count; ++i) {
        const PCRE2_SPTR entry = table + std::size_t(i) * entry_size;
        const int number = (entry[0] << 8) | entry[1];
        std::string name(reinterpret_cast<const char*>(entry + 2));
        names_.push_back(name);
        impl_->groups.emplace_back(std::move(name), number);
    }
}

LinePattern::~LinePattern() = default;
LinePattern::LinePattern(LinePattern&&) noexcept = default;
LinePattern& LinePattern::operator=(LinePattern&&) noexcept = default;

bool LinePattern::has_group(std::string_view name) const {
    return std::find(names_.begin(), names_.end(), name) != names_.end();
}

std::optional<std::map<std::string, std::string>> LinePattern::match(std::string_view line) const {
    line = line.substr(0, std::min(line.size(), kMaxLineBytes));
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
        pcre2_match_data_create_from_pattern(impl_->code, nullptr), &pcre2_match_data_free);
    const int rc = pcre2_match(impl_->code, reinterpret_cast<PCRE2_SPTR>(line.data()), line.size(), 0, 0,
                               data.get(), impl_->context);
    if (rc < 0) return std::nullopt; // no match, or a limit reached: either way not a step line
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.get());
    const uint32_t pairs = pcre2_get_ovector_count(data.get());
    std::map<std::string, std::string> out;
    for (const auto& [name, number] : impl_->groups) {
        if (static_cast<uint32_t>(number) >= pairs) continue;
        const PCRE2_SIZE begin = ov[2 * number], end = ov[2 * number + 1];
        if (begin == PCRE2_UNSET || end == PCRE2_UNSET) continue;
        out[name] = std::string(line.substr(begin, end - begin));
    }
    return out;
}

} // namespace infrarsi::measure
