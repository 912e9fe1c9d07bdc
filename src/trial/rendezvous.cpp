#include "trial/rendezvous.hpp"

#include "util/error.hpp"
#include "util/fd.hpp"

#include <arpa/inet.h>
#include <cerrno>
#include <cstring>
#include <netinet/in.h>
#include <sys/socket.h>

namespace infrarsi::trial {

int free_tcp_port() {
    UniqueFd s(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!s) throw Error(std::string("cannot open a socket: ") + std::strerror(errno), "rendezvous port");
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY); // free on every address, as a store that binds 0.0.0.0 needs
    a.sin_port = 0;
    if (::bind(s.get(), reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
        throw Error(std::string("cannot bind a socket: ") + std::strerror(errno), "rendezvous port");
    socklen_t len = sizeof a;
    if (::getsockname(s.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0)
        throw Error(std::string("cannot read the bound port: ") + std::strerror(errno), "rendezvous port");
    return ntohs(a.sin_port);
}

void add_rendezvous_port(std::map<std::string, std::string>& env) {
    if (env.count("MASTER_PORT")) return;
    const std::string port = std::to_string(free_tcp_port());
    env["MASTER_PORT"] = port;
    env.emplace("PET_MASTER_PORT", port);
}

} // namespace infrarsi::trial
