// What the daemon's two HTTP proxies (the model relay and the egress proxy) are written with:
// Boost.Asio coroutines and Beast's HTTP, under short names in corral::supervisor. For their .cc
// files only; a header that includes this one would hand the names to its includers.
#pragma once

#include <utility>  // before asio's awaitable.hpp, which uses std::exchange without it

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

namespace corral::supervisor {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using asio::awaitable;
using asio::use_awaitable;
using tcp = asio::ip::tcp;

}  // namespace corral::supervisor
