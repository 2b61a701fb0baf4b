//! The links of an HTML page a pod or Service serves through the API server's proxy, made
//! to lead back through the proxy (kube's proxy transport): an absolute path (`/rewriteme`)
//! in a link attribute gets the proxy's own path in front
//! (`/api/v1/namespaces/ns/pods/web/proxy/rewriteme`), as does a redirect's `Location`.
//! Relative links, links to other hosts and links already under the proxy stay.

/// The attributes holding URLs, by element (kube's `atomsToAttrs`).
const LINKS: &[(&str, &[&str])] = &[
    ("a", &["href"]),
    ("applet", &["codebase"]),
    ("area", &["href"]),
    ("audio", &["src"]),
    ("base", &["href"]),
    ("blockquote", &["cite"]),
    ("body", &["background"]),
    ("button", &["formaction"]),
    ("command", &["icon"]),
    ("del", &["cite"]),
    ("embed", &["src"]),
    ("form", &["action"]),
    ("frame", &["longdesc", "src"]),
    ("head", &["profile"]),
    ("html", &["manifest"]),
    ("iframe", &["longdesc", "src"]),
    ("img", &["longdesc", "src", "usemap"]),
    ("input", &["src", "usemap", "formaction"]),
    ("ins", &["cite"]),
    ("link", &["href"]),
    ("object", &["classid", "codebase", "data", "usemap"]),
    ("q", &["cite"]),
    ("script", &["src"]),
    ("source", &["src"]),
    ("video", &["poster", "src"]),
];

/// `url` as it leads through the proxy at `prefix` (kube's `rewriteURL`): an absolute path
/// not yet under `prefix` gets it in front (a trailing slash kept); anything else stays.
pub(crate) fn url(url: &str, prefix: &str) -> String {
    if !url.starts_with('/') || url.starts_with("//") || url.starts_with(prefix) {
        return url.to_owned();
    }
    format!("{}{url}", prefix.trim_end_matches('/'))
}

/// `html` with the links of [`LINKS`] rewritten by [`url`].
pub(crate) fn html(html: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(html.len() + 64);
    let mut rest = html;
    while let Some(open) = rest.find('<') {
        out.push_str(&rest[..open]);
        rest = &rest[open..];
        let name_len = rest[1..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len() - 1);
        let name = rest[1..=name_len].to_ascii_lowercase();
        let Some(attributes) = LINKS.iter().find(|(n, _)| *n == name).map(|(_, a)| *a) else {
            out.push('<');
            rest = &rest[1..];
            continue;
        };
        let (tag, after) = tag(rest, name_len + 1, attributes, prefix);
        out.push_str(&tag);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The start tag at the head of `text` (its name `start` bytes long, `<` included) with the
/// values of `attributes` rewritten, and what follows it.
fn tag<'a>(text: &'a str, start: usize, attributes: &[&str], prefix: &str) -> (String, &'a str) {
    let bytes = text.as_bytes();
    let mut out = String::from(&text[..start]);
    let mut i = start;
    while i < bytes.len() {
        let c = bytes[i];
        if c == b'>' {
            out.push('>');
            return (out, &text[i + 1..]);
        }
        if !c.is_ascii_alphabetic() {
            let next = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + next]);
            i += next;
            continue;
        }
        // An attribute: its name, and perhaps `=` and a value.
        let name_end = text[i..]
            .find(|c: char| c.is_ascii_whitespace() || c == '=' || c == '>' || c == '/')
            .map_or(bytes.len(), |n| i + n);
        let name = text[i..name_end].to_ascii_lowercase();
        out.push_str(&text[i..name_end]);
        i = name_end;
        let spaces = text[i..]
            .find(|c: char| !c.is_ascii_whitespace())
            .map_or(bytes.len(), |n| i + n);
        if bytes.get(spaces) != Some(&b'=') {
            continue;
        }
        let value_start = text[spaces + 1..]
            .find(|c: char| !c.is_ascii_whitespace())
            .map_or(bytes.len(), |n| spaces + 1 + n);
        out.push_str(&text[i..value_start]);
        let (quote, from) = match bytes.get(value_start) {
            Some(q @ (b'"' | b'\'')) => (Some(char::from(*q)), value_start + 1),
            _ => (None, value_start),
        };
        let to = match quote {
            Some(q) => text[from..].find(q).map_or(bytes.len(), |n| from + n),
            None => text[from..]
                .find(|c: char| c.is_ascii_whitespace() || c == '>')
                .map_or(bytes.len(), |n| from + n),
        };
        let value = &text[from..to];
        let value = if attributes.contains(&name.as_str()) {
            url(value, prefix)
        } else {
            value.to_owned()
        };
        if let Some(q) = quote {
            out.push(q);
            out.push_str(&value);
            if to < bytes.len() {
                out.push(q);
            }
            i = (to + 1).min(bytes.len());
        } else {
            out.push_str(&value);
            i = to;
        }
    }
    (out, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    const PREFIX: &str = "/api/v1/namespaces/ns/pods/http:web:80/proxy";

    #[test]
    fn absolute_links_lead_back_through_the_proxy() {
        assert_eq!(
            html(r#"<a href="/rewriteme">test</a>"#, PREFIX),
            format!(r#"<a href="{PREFIX}/rewriteme">test</a>"#)
        );
        assert_eq!(
            html(
                "<HTML><IMG SRC='/x.png' alt=\"/no\"><form action=/post method=post>",
                PREFIX
            ),
            format!(
                "<HTML><IMG SRC='{PREFIX}/x.png' alt=\"/no\"><form action={PREFIX}/post method=post>"
            )
        );
        assert_eq!(
            html(r#"<link rel=stylesheet href="/s/">"#, PREFIX),
            format!(r#"<link rel=stylesheet href="{PREFIX}/s/">"#)
        );
    }

    #[test]
    fn other_links_and_text_stay() {
        for page in [
            r#"<a href="relative/page">x</a>"#,
            r#"<a href="http://elsewhere/x">x</a>"#,
            r#"<a href="//cdn/x">x</a>"#,
            r#"<p title="/not-a-link">1 < 2 and 3 > 2</p>"#,
            "<a href='/api/v1/namespaces/ns/pods/http:web:80/proxy/done'>",
            "<",
            "ünïcode <b>fine</b>",
        ] {
            assert_eq!(html(page, PREFIX), page, "{page}");
        }
        assert_eq!(url("/", PREFIX), format!("{PREFIX}/"));
    }
}
