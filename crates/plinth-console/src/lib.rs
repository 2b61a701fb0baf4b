//! The web console: a single-page app served at `/ui/`, its assets compiled into the binary.
//!
//! The page holds no data and needs no credentials to load; everything it shows it reads
//! from the API in the browser, with the user's own token (or client certificate), so the API
//! server's authentication and RBAC decide what it may see and do. It works with no network
//! beyond the Plinth server: no fonts, scripts or styles from elsewhere (its
//! `Content-Security-Policy` says so).
//!
//! What it does: browse groups, kinds, namespaces and objects, kept live by watches; view and
//! edit YAML (server-side apply; conflicts shown, with a forced apply); an object's owner
//! graph (owners, dependents, finalizers, what blocks a deletion); its Events, its history with
//! diffs and its timeline (the history API, `history.plinth.dev`); a pod's logs, followed, and
//! a shell in it (exec over a WebSocket); who can do what, from RBAC.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

/// One asset of the console.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asset {
    /// Its `Content-Type`.
    pub content_type: &'static str,
    /// Its bytes.
    pub body: &'static [u8],
}

/// The policy every console response carries: the page loads only its own assets and talks
/// only to the server it came from (WebSockets to it included).
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; connect-src 'self' wss: ws:; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'";

const INDEX: Asset = Asset {
    content_type: "text/html; charset=utf-8",
    body: include_bytes!("../assets/index.html"),
};

/// The asset at `path` under `/ui/` (`""` and `index.html` are the page itself); `None` for
/// anything else.
pub fn asset(path: &str) -> Option<Asset> {
    match path.trim_start_matches('/') {
        "" | "index.html" => Some(INDEX),
        "app.js" => Some(Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../assets/app.js"),
        }),
        "style.css" => Some(Asset {
            content_type: "text/css; charset=utf-8",
            body: include_bytes!("../assets/style.css"),
        }),
        "yaml.js" => Some(Asset {
            content_type: "text/javascript; charset=utf-8",
            body: include_bytes!("../assets/yaml.js"),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_and_its_assets_are_served_and_nothing_else() {
        assert_eq!(asset(""), asset("index.html"));
        let page = std::str::from_utf8(asset("").map(|a| a.body).unwrap_or_default()).unwrap_or("");
        for wanted in ["app.js", "style.css"] {
            assert!(page.contains(wanted), "the page loads {wanted}");
            assert!(asset(wanted).is_some());
        }
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no outside URLs"
        );
        assert_eq!(asset("../Cargo.toml"), None);
        assert_eq!(asset("secrets"), None);
    }
}
