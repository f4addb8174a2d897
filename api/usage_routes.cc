// What users spent: a user's own report, and the operator's export of the ledger.
#include <time.h>

#include <cerrno>
#include <utility>

#include "api/auth_mapping.h"
#include "api/protocol_json.h"
#include "api/routes.h"
#include "common/unix_time.h"
#include "supervisor/relay/usage.h"

namespace corral::api {
namespace {

// One page of the export, as JSON lines or CSV; the next page's after_id in a header.
StatusOr<HttpResponse> ExportLedger(const supervisor::Ledger& ledger, const std::map<std::string, std::string>& query) {
  ASSIGN_OR_RETURN(LedgerExport asked, ParseLedgerExport(query, UnixNow()));
  ASSIGN_OR_RETURN(supervisor::LedgerPage page, ledger.Page(asked.query));
  HttpResponse response;
  if (asked.csv) {
    response.content_type = "text/csv; charset=utf-8";
    response.body = supervisor::LedgerCsvHeader();
    for (const auto& row : page.rows) response.body += supervisor::LedgerCsvLine(row);
  } else {
    response.content_type = "application/x-ndjson";
    for (const auto& row : page.rows) response.body += supervisor::LedgerRowJson(row).dump() + "\n";
  }
  // Paging: the next request passes after_id=<this>.
  if (page.more) response.headers.push_back({"X-Corral-Next-After-Id", std::to_string(page.rows.back().id)});
  return response;
}

}  // namespace

void RegisterUsageRoutes(Server& server, const supervisor::Ledger& ledger, supervisor::SandboxManager& manager) {
  server.Route("GET", "/v1/usage", Auth::kRequired, [&ledger, &manager](HttpRequest request, Responder respond) {
    if (request.auth.admin) {
      return respond(ErrorResponse(
          Status::Error("the admin socket has no budget of its own: GET /v1/admin/usage exports the ledger", EINVAL)));
    }
    auto report = ledger.Report(request.auth.iss, request.auth.sub, request.auth.claims.budget, UnixNow(),
                                manager.UnmeteredCompute(request.auth.iss, request.auth.sub));
    if (!report.ok()) return respond(ErrorResponse(report.status()));
    respond(JsonResponse(200, *report));
  });
  server.Route("GET", "/v1/admin/usage", Auth::kAdminOnly, [&ledger](HttpRequest request, Responder respond) {
    auto export_rows = ExportLedger(ledger, request.query);
    if (!export_rows.ok()) return respond(ErrorResponse(export_rows.status()));
    respond(std::move(*export_rows));
  });
}

}  // namespace corral::api
