#include "submit_args.hpp"

#include "util/printable.hpp"

#include <filesystem>
#include <fstream>

namespace infrarsi::spank {

std::optional<std::string> find_batch_script(const std::vector<std::string>& argv, const std::string& cwd) {
    for (size_t i = 1; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a.empty() || a[0] == '-') continue;
        std::string path = absolute_path(a, cwd);
        std::error_code ec;
        if (!std::filesystem::is_regular_file(path, ec)) continue;
        std::ifstream in(path, std::ios::binary);
        char head[2] = {0, 0};
        if (in.read(head, 2) && head[0] == '#' && head[1] == '!') return path;
    }
    return std::nullopt;
}

std::string default_contract_for(const std::string& script) {
    std::filesystem::path p(script);
    return (p.parent_path() / (p.stem().string() + ".contract.toml")).string();
}

std::string absolute_path(const std::string& path, const std::string& cwd) {
    if (!path.empty() && path[0] == '/') return std::filesystem::path(path).lexically_normal().string();
    return (std::filesystem::path(cwd) / path).lexically_normal().string();
}

bool valid_path_value(const std::string& path) {
    return !path.empty() && path[0] == '/' && path.size() <= 4096 && printable(path);
}

} // namespace infrarsi::spank
