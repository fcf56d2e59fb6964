import Foundation

/// Server-rendered HTML: every stored string goes through ``HTML/escape(_:)`` — a queued URL,
/// header value, error text or body excerpt holding `<script>` reads as text.
enum HTML {
    /// `text` safe in an element's content and in a quoted attribute value.
    static func escape(_ text: String) -> String {
        var escaped = ""
        escaped.reserveCapacity(text.utf8.count)
        for character in text.unicodeScalars {
            switch character {
            case "&": escaped += "&amp;"
            case "<": escaped += "&lt;"
            case ">": escaped += "&gt;"
            case "\"": escaped += "&quot;"
            case "'": escaped += "&#39;"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }

    /// `text` as one path segment of a link (`/queues/NAME`).
    static func segment(_ text: String) -> String {
        text.addingPercentEncoding(withAllowedCharacters: .alphanumerics.union(CharacterSet(charactersIn: "-._~"))) ?? ""
    }

    static let style = """
        body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d232a;background:#f6f7f9}
        header{background:#1d232a;color:#fff;padding:10px 24px;display:flex;gap:24px;align-items:baseline}
        header a{color:#fff;text-decoration:none;font-weight:600}header span{color:#9aa4ae}
        main{padding:16px 24px;max-width:1200px}h1{font-size:20px;margin:8px 0 16px}h2{font-size:16px;margin:24px 0 8px}
        table{border-collapse:collapse;background:#fff;width:100%;box-shadow:0 1px 2px #0001}
        th,td{padding:6px 10px;border-bottom:1px solid #e6e8eb;text-align:left;vertical-align:top}
        th{font-weight:600;color:#5b6670;font-size:12px;text-transform:uppercase}
        td.n{text-align:right;font-variant-numeric:tabular-nums}code,.mono{font-family:ui-monospace,monospace;font-size:12px}
        .dead{color:#b42318}.paused{color:#b54708;font-weight:600}.ok{color:#067647}
        form.inline{display:inline}button{font:inherit;padding:3px 10px;border:1px solid #c4cad1;border-radius:4px;background:#fff;cursor:pointer}
        button.danger{border-color:#b42318;color:#b42318}button.primary{border-color:#175cd3;color:#175cd3}
        pre{background:#fff;padding:10px;overflow:auto;max-height:400px;box-shadow:0 1px 2px #0001}
        .chart{display:block}.muted{color:#5b6670}.flash{background:#ecfdf3;border:1px solid #abefc6;padding:8px 12px;margin-bottom:12px}
        dl{display:grid;grid-template-columns:180px 1fr;gap:4px 16px;background:#fff;padding:12px;box-shadow:0 1px 2px #0001}dt{color:#5b6670}dd{margin:0;word-break:break-all}
        """

    /// A whole page: `title` and `body` (already HTML), the console's header, and the live-update
    /// script when `live`.
    static func page(title: String, base: String, body: String, live: Bool = false) -> String {
        """
        <!doctype html>
        <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
        <title>\(escape(title)) · brick-queue</title><style>\(style)</style></head>
        <body><header><a href="\(escape(base))/">brick-queue</a><span>offline queues</span></header>
        <main>\(body)</main>\(live ? liveScript(base: base) : "")</body></html>
        """
    }

    /// Follows `/events` (server-sent events) and updates every `[data-count="QUEUE FIELD"]` cell.
    static func liveScript(base: String) -> String {
        """
        <script>
        (function(){
          var source = new EventSource("\(escape(base))/events");
          source.addEventListener("counts", function(event){
            var byName = {};
            JSON.parse(event.data).forEach(function(q){ byName[q.queue] = q; });
            document.querySelectorAll("[data-count]").forEach(function(cell){
              var key = cell.getAttribute("data-count"), space = key.lastIndexOf(" ");
              var q = byName[key.slice(0, space)], field = key.slice(space + 1);
              // A queue no longer counted holds nothing now.
              cell.textContent = q ? String(q[field]) : (field === "delivered" || field === "failed" ? cell.textContent : field === "oldest" ? "–" : "0");
            });
            document.querySelectorAll("[data-chart]").forEach(function(cell){
              var q = byName[cell.getAttribute("data-chart")];
              if (q) { cell.innerHTML = q.chart; }
            });
            var stamp = document.getElementById("updated");
            if (stamp) { stamp.textContent = "live, updated " + new Date().toLocaleTimeString(); }
          });
        })();
        </script>
        """
    }
}
