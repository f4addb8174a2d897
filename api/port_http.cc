#include "api/port_http.h"

#include <algorithm>

#include "api/http_text.h"

namespace corral::api::internal {

namespace {

bool AllDigits(std::string_view s) {
  if (s.empty() || s.size() > 5) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// The route of a host-form name ("3000-sb-xxxx" below the domain), or nullopt.
std::optional<PortRoute> HostRoute(std::string_view host, std::string_view target, std::string_view domain) {
  const size_t colon = host.rfind(':');
  const std::string name = ToLower(host.substr(0, colon == std::string_view::npos ? host.size() : colon));
  const std::string suffix = "." + ToLower(domain);
  if (name.size() <= suffix.size() || name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string label = name.substr(0, name.size() - suffix.size());
  const size_t dash = label.find('-');
  if (dash == std::string::npos || !AllDigits(label.substr(0, dash)) || label.size() <= dash + 4 ||
      label.compare(dash + 1, 2, "sb") != 0 || (label[dash + 3] != '_' && label[dash + 3] != '-')) {
    return std::nullopt;
  }
  PortRoute route;
  route.by_host = true;
  route.port = std::stoll(label.substr(0, dash));
  route.sandbox_id = "sb_" + label.substr(dash + 4);
  route.rest = std::string(target);
  return route;
}

}  // namespace

std::optional<PortRoute> MatchPortRoute(std::string_view method, std::string_view host, std::string_view target,
                                        std::string_view domain) {
  if (!domain.empty()) {
    if (auto route = HostRoute(host, target, domain)) return route;
  }
  static constexpr std::string_view kStart = "/v1/sandboxes/";
  if (target.substr(0, kStart.size()) != kStart) return std::nullopt;
  std::string_view after = target.substr(kStart.size());
  size_t slash = after.find('/');
  if (slash == std::string_view::npos) return std::nullopt;
  std::string_view id = after.substr(0, slash);
  after.remove_prefix(slash);
  static constexpr std::string_view kPorts = "/ports/";
  if (after.substr(0, kPorts.size()) != kPorts) return std::nullopt;
  after.remove_prefix(kPorts.size());
  slash = after.find('/');
  if (slash == std::string_view::npos || !AllDigits(after.substr(0, slash))) return std::nullopt;
  PortRoute route;
  route.sandbox_id = std::string(id);
  route.port = std::stoll(std::string(after.substr(0, slash)));
  route.rest = std::string(after.substr(slash));
  route.prefix = std::string(target.substr(0, target.size() - route.rest.size()));
  // The API's own route below the prefix.
  if (method == "POST" && (route.rest == "/signed-url" || route.rest.rfind("/signed-url?", 0) == 0)) return std::nullopt;
  return route;
}

std::string StripCorralParams(std::string_view target, std::map<std::string, std::string>& found) {
  const size_t question = target.find('?');
  if (question == std::string_view::npos) return std::string(target);
  std::string out(target.substr(0, question));
  std::string_view query = target.substr(question + 1);
  std::string kept;
  while (!query.empty()) {
    const size_t amp = std::min(query.find('&'), query.size());
    std::string_view pair = query.substr(0, amp);
    query.remove_prefix(std::min(amp + 1, query.size()));
    const std::string name = PercentDecode(pair.substr(0, pair.find('=')), true).value_or("");
    if (name == "token" || name == "corral_sig" || name == "corral_exp") {
      const size_t equals = pair.find('=');
      const std::string_view value = equals == std::string_view::npos ? std::string_view() : pair.substr(equals + 1);
      found[name] = PercentDecode(value, true).value_or("");
      continue;
    }
    if (pair.empty()) continue;
    kept += (kept.empty() ? "" : "&") + std::string(pair);
  }
  return kept.empty() ? out : out + "?" + kept;
}

std::string StripCookie(std::string_view cookies, std::string_view name, std::string& value) {
  std::string kept;
  while (!cookies.empty()) {
    const size_t semi = std::min(cookies.find(';'), cookies.size());
    const std::string_view pair = Trim(cookies.substr(0, semi));
    cookies.remove_prefix(std::min(semi + 1, cookies.size()));
    if (pair.empty()) continue;
    const size_t equals = pair.find('=');
    if (Trim(pair.substr(0, equals)) == name) {
      value = equals == std::string_view::npos ? std::string() : std::string(Trim(pair.substr(equals + 1)));
      continue;
    }
    kept += (kept.empty() ? "" : "; ") + std::string(pair);
  }
  return kept;
}

std::string ConfineSetCookie(std::string_view value, std::string_view path) {
  size_t semi = std::min(value.find(';'), value.size());
  std::string out(Trim(value.substr(0, semi)));
  value.remove_prefix(semi);
  while (!value.empty()) {
    value.remove_prefix(1);  // the ';'
    semi = std::min(value.find(';'), value.size());
    const std::string_view attribute = Trim(value.substr(0, semi));
    value.remove_prefix(semi);
    const std::string name = ToLower(Trim(attribute.substr(0, attribute.find('='))));
    if (attribute.empty() || name == "domain" || (!path.empty() && name == "path")) continue;
    out += "; " + std::string(attribute);
  }
  if (!path.empty()) out += "; Path=" + std::string(path);
  return out;
}

std::string StripTokenSubprotocols(std::string_view value, const std::function<bool(const std::string&)>& is_token) {
  std::string kept;
  while (!value.empty()) {
    const size_t comma = std::min(value.find(','), value.size());
    const std::string_view entry = Trim(value.substr(0, comma));
    value.remove_prefix(std::min(comma + 1, value.size()));
    if (entry.empty()) continue;
    static constexpr std::string_view kBearer = "bearer.";
    if (entry.substr(0, kBearer.size()) == kBearer && is_token(std::string(entry.substr(kBearer.size())))) continue;
    kept += (kept.empty() ? "" : ", ") + std::string(entry);
  }
  return kept;
}

std::string ClientResponseHead(const boost::beast::http::response_header<>& head, std::string_view added,
                               std::string_view cookie_path) {
  std::string out = head.version() == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(head.result_int()) + " " + std::string(head.reason()) + "\r\n";
  out += added;
  // The answer is the connection's last (the app was asked with Connection: close): a client
  // never sends another request on it, which would pass by this function.
  const bool final_answer = head.result_int() >= 200;
  if (final_answer) out += "Connection: close\r\n";
  for (const auto& field : head) {
    const std::string_view name(field.name_string().data(), field.name_string().size());
    const std::string_view value(field.value().data(), field.value().size());
    if (final_answer && (IEquals(name, "connection") || IEquals(name, "keep-alive") || IEquals(name, "proxy-connection"))) {
      continue;
    }
    out += std::string(name) + ": ";
    out += IEquals(name, "set-cookie") ? ConfineSetCookie(value, cookie_path) : std::string(value);
    out += "\r\n";
  }
  return out + "\r\n";
}

}  // namespace corral::api::internal
