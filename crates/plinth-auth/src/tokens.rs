//! kube-apiserver's static token file (`--token-auth-file`): CSV lines
//! `token,user,uid[,"group1,group2,..."]`; blank lines and `#` comments are skipped.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use super::User;

/// A token file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenFileError {
    /// It cannot be read.
    #[error("cannot read the token file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A line is not `token,user,uid[,groups]`.
    #[error("{path}, line {line}: {why}")]
    Line {
        /// The file.
        path: PathBuf,
        /// The line number (from 1).
        line: usize,
        /// What is wrong.
        why: &'static str,
    },
}

/// The users of the token file at `path`, by token.
pub(super) fn read(path: &Path) -> Result<HashMap<String, User>, TokenFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| TokenFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|(line, why)| TokenFileError::Line {
        path: path.to_owned(),
        line,
        why,
    })
}

fn parse(text: &str) -> Result<HashMap<String, User>, (usize, &'static str)> {
    let mut users = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields = split_csv(line).ok_or((i + 1, "an unterminated quote"))?;
        let [token, name, uid, rest @ ..] = fields.as_slice() else {
            return Err((i + 1, "expected token,user,uid[,groups]"));
        };
        if token.is_empty() || name.is_empty() {
            return Err((i + 1, "the token and the user name must not be empty"));
        }
        let groups: Vec<&str> = rest
            .first()
            .map(|g| {
                g.split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let mut user = User::new(name, &groups);
        user.uid.clone_from(uid);
        users.insert(token.clone(), user);
    }
    Ok(users)
}

/// One CSV line's fields (double quotes group, `""` inside quotes is a quote).
fn split_csv(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        let field = fields.last_mut()?;
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                chars.next();
                field.push('"');
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(String::new()),
            (c, _) => field.push(c),
        }
    }
    (!quoted).then(|| fields.into_iter().map(|f| f.trim().to_owned()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_become_users() {
        let users =
            parse("# comment\n\nt1,alice,uid-1,\"dev,ops\"\nt2,bob,uid-2\nt3,carol,uid-3,solo\n")
                .unwrap();
        assert_eq!(users["t1"].name, "alice");
        assert_eq!(users["t1"].uid, "uid-1");
        assert_eq!(
            users["t1"].groups,
            ["dev", "ops", "system:authenticated"].map(String::from)
        );
        assert_eq!(
            users["t2"].groups,
            ["system:authenticated"].map(String::from)
        );
        assert_eq!(
            users["t3"].groups,
            ["solo", "system:authenticated"].map(String::from)
        );
    }

    #[test]
    fn malformed_lines_are_named() {
        assert_eq!(
            parse("t1,alice").unwrap_err(),
            (1, "expected token,user,uid[,groups]")
        );
        assert_eq!(
            parse("ok,a,b\nt,\"x,y").unwrap_err(),
            (2, "an unterminated quote")
        );
        assert_eq!(
            parse(",alice,uid").unwrap_err().1,
            "the token and the user name must not be empty"
        );
    }
}
