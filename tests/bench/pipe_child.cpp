#include "pipe_child.hpp"

#include "util/error.hpp"
#include "util/process.hpp"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace infrarsi::bench {

PipeChild::PipeChild(const std::vector<std::string>& argv) : command_(describe_command(argv)) {
    int in[2], out[2];
    if (::pipe2(in, O_CLOEXEC) != 0) throw Error(std::string("pipe: ") + std::strerror(errno), command_);
    if (::pipe2(out, O_CLOEXEC) != 0) {
        ::close(in[0]), ::close(in[1]);
        throw Error(std::string("pipe: ") + std::strerror(errno), command_);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    std::vector<char*> args;
    for (const auto& a : argv)
        args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    int rc = ::posix_spawnp(&pid_, args[0], &fa, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&fa);
    ::close(in[0]), ::close(out[1]);
    if (rc != 0) {
        ::close(in[1]), ::close(out[0]);
        throw Error(std::string("cannot start: ") + std::strerror(rc), command_);
    }
    to_ = ::fdopen(in[1], "w");
    from_ = ::fdopen(out[0], "r");
}

PipeChild::~PipeChild() {
    if (to_) std::fclose(to_); // EOF tells the child to finish
    if (from_) std::fclose(from_);
    if (pid_ > 0) {
        int status = 0;
        ::waitpid(pid_, &status, 0);
    }
}

void PipeChild::send(const std::string& line) {
    if (std::fputs(line.c_str(), to_) < 0 || std::fputc('\n', to_) == EOF || std::fflush(to_) != 0)
        throw Error("write to child failed", command_);
}

std::string PipeChild::receive() {
    std::string line;
    for (int c; (c = std::fgetc(from_)) != EOF;) {
        if (c == '\n') return line;
        line.push_back(static_cast<char>(c));
    }
    throw Error("child closed its output", command_, "a reply line");
}

} // namespace infrarsi::bench
