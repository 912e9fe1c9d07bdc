#include "util/bounded_json.hpp"

#include "util/error.hpp"

#include <utility>
#include <vector>

namespace infrarsi {
namespace {

using nlohmann::json;

// Builds the value as nlohmann's own DOM parser does, and refuses an array or object that would open past
// the depth limit, while the value built so far is at most that deep. (nlohmann's parser callback would do
// the same check, but its DOM builder rescans the parent at each closing brace: quadratic in a long array.)
class DepthLimitedBuilder {
  public:
    DepthLimitedBuilder(json& root, std::size_t max_depth, const std::string& where,
                        const std::string& expected)
        : root_(root), max_depth_(max_depth), where_(where), expected_(expected) {}

    bool null() { return put(nullptr), true; }
    bool boolean(bool v) { return put(v), true; }
    bool number_integer(json::number_integer_t v) { return put(v), true; }
    bool number_unsigned(json::number_unsigned_t v) { return put(v), true; }
    bool number_float(json::number_float_t v, const json::string_t&) { return put(v), true; }
    bool string(json::string_t& v) { return put(std::move(v)), true; }
    bool binary(json::binary_t& v) { return put(json::binary(std::move(v))), true; }
    bool start_object(std::size_t) { return open(json::object()), true; }
    bool key(json::string_t& k) {
        member_ = &(*open_.back())[k];
        return true;
    }
    bool end_object() { return open_.pop_back(), true; }
    bool start_array(std::size_t) { return open(json::array()), true; }
    bool end_array() { return open_.pop_back(), true; }
    bool parse_error(std::size_t, const std::string&, const json::exception& e) {
        throw Error(std::string("not valid JSON: ") + e.what(), where_, expected_);
    }

  private:
    // The new value's place: the root, the next element of the open array, or the member just keyed. A
    // pointer kept in open_ stays valid: nothing is added to a container while a child of it is open.
    template <class V> json* put(V&& v) {
        if (open_.empty()) {
            root_ = json(std::forward<V>(v));
            return &root_;
        }
        if (open_.back()->is_array()) {
            open_.back()->emplace_back(std::forward<V>(v));
            return &open_.back()->back();
        }
        *member_ = json(std::forward<V>(v));
        return member_;
    }
    void open(json empty) {
        if (open_.size() + 1 > max_depth_)
            throw Error("JSON nested more than " + std::to_string(max_depth_) + " levels deep", where_,
                        "at most " + std::to_string(max_depth_) + " levels: " + expected_);
        open_.push_back(put(std::move(empty)));
    }

    json& root_;
    std::size_t max_depth_;
    const std::string& where_;
    const std::string& expected_;
    std::vector<json*> open_;
    json* member_ = nullptr;
};

} // namespace

json parse_bounded_json(std::string_view text, const std::string& where, const std::string& expected,
                        JsonLimits limits) {
    if (text.size() > limits.max_bytes)
        throw Error("is " + std::to_string(text.size()) + " bytes of JSON", where,
                    "at most " + std::to_string(limits.max_bytes) + " bytes: " + expected);
    json out;
    DepthLimitedBuilder builder(out, limits.max_depth, where, expected);
    json::sax_parse(text.begin(), text.end(), &builder);
    return out;
}

json read_bounded_json(const std::string& path, const std::string& expected, JsonLimits limits,
                       bool follow_symlink) {
    return parse_bounded_json(
        read_regular_file(path, {.max_bytes = limits.max_bytes, .follow_symlink = follow_symlink}), path,
        expected, limits);
}

} // namespace infrarsi
