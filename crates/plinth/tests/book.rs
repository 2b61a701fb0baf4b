//! The book's shell sessions run as written: every ```` ```console ```` block of
//! `docs/book/src` — `$ ` lines are commands (with their continuation and here-document lines),
//! the lines after them the output expected — runs in one shell per page against a fresh
//! `plinth serve` with a node agent, in the repository's checkout, the way a reader would type it (`KUBECONFIG` naming its
//! kubeconfig, as "Getting started" sets it). A command must succeed,
//! unless the output shown is an error (`Error…`, `error:`, `The … is invalid`); the output must
//! match what is shown, whitespace runs counting as one, `...` standing for any text within a
//! line, and a line of only `...` for any number of lines.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{Backend, Plinth};

/// One command of a session and the output shown after it.
#[derive(Debug)]
struct Step {
    command: String,
    expected: Vec<String>,
}

/// The console sessions of a Markdown page, in order.
fn sessions(markdown: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    let mut in_block = false;
    // The here-document delimiter or line continuation a command still waits for.
    let mut open_heredoc: Option<String> = None;
    let mut continued = false;
    for line in markdown.lines() {
        if !in_block {
            in_block = line.trim() == "```console";
            continue;
        }
        if open_heredoc.is_none() && !continued && line.trim_start().starts_with("```") {
            in_block = false;
            continue;
        }
        if let Some(delimiter) = &open_heredoc {
            let step = steps
                .last_mut()
                .expect("a here-document belongs to a command");
            step.command.push('\n');
            step.command.push_str(line);
            if line.trim() == delimiter {
                open_heredoc = None;
            }
            continue;
        }
        if continued {
            let step = steps
                .last_mut()
                .expect("a continuation belongs to a command");
            step.command.push('\n');
            step.command.push_str(line);
        } else if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_owned(),
                expected: Vec::new(),
            });
        } else {
            let step = steps
                .last_mut()
                .unwrap_or_else(|| panic!("output before any command: {line}"));
            step.expected.push(line.to_owned());
            continue;
        }
        continued = line.ends_with('\\');
        open_heredoc = heredoc(line);
    }
    assert!(!in_block, "a console block is not closed");
    steps
}

/// The delimiter of a here-document a command line opens (`<<'YAML'`, `<<EOF`), not `<<<`.
fn heredoc(line: &str) -> Option<String> {
    let at = line.find("<<")?;
    let rest = &line[at + 2..];
    if rest.starts_with('<') {
        return None;
    }
    let word: String = rest
        .trim_start_matches('-')
        .trim_start()
        .trim_start_matches(['\'', '"'])
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!word.is_empty()).then_some(word)
}

/// Whether the output shown is an error, so the command must fail.
fn shows_error(expected: &[String]) -> bool {
    expected.first().is_some_and(|line| {
        line.starts_with("Error")
            || line.starts_with("error:")
            || (line.starts_with("The ") && line.contains(" is invalid"))
    })
}

fn squeeze(line: &str) -> String {
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `line` matches `pattern`, where `...` stands for any text.
fn line_matches(pattern: &str, line: &str) -> bool {
    let pattern = squeeze(pattern);
    let line = squeeze(line);
    let parts: Vec<&str> = pattern.split("...").collect();
    if parts.len() == 1 {
        return pattern == line;
    }
    let mut rest = line.as_str();
    for (i, part) in parts.iter().enumerate() {
        let part = part.trim();
        if i == 0 {
            let Some(after) = rest.strip_prefix(part) else {
                return false;
            };
            rest = after;
        } else if i == parts.len() - 1 {
            return rest.trim_end().ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// The output lines match the expected ones (a line of only `...` takes any number).
fn output_matches(expected: &[String], actual: &[String]) -> bool {
    match expected.split_first() {
        None => actual.is_empty(),
        Some((first, rest)) if first.trim() == "..." => {
            (0..=actual.len()).any(|skip| output_matches(rest, &actual[skip..]))
        }
        Some((first, rest)) => actual
            .split_first()
            .is_some_and(|(line, more)| line_matches(first, line) && output_matches(rest, more)),
    }
}

/// Go's module and build caches where they are for this user (a reader has theirs; the
/// session's own home would fetch and build every module again), when Go is installed.
fn go_caches() -> Vec<(String, String)> {
    let Ok(out) = Command::new("go")
        .args(["env", "GOPATH", "GOMODCACHE", "GOCACHE"])
        .output()
    else {
        return Vec::new();
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    ["GOPATH", "GOMODCACHE", "GOCACHE"]
        .into_iter()
        .zip(text.lines())
        .filter(|(_, value)| out.status.success() && !value.is_empty())
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Runs a page's steps in one shell against `plinth`; returns every mismatch.
fn run_page(page: &Path, steps: &[Step], plinth: &Plinth) -> Vec<String> {
    let home = tempfile::tempdir().unwrap();
    let share = home.path().join(".local/share");
    std::fs::create_dir_all(&share).unwrap();
    std::os::unix::fs::symlink(plinth.dir.path(), share.join("plinth")).unwrap();
    // The reader is in the repository's checkout ("Getting started" builds from it).
    let checkout = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let outputs = home.path().join("out");
    std::fs::create_dir_all(&outputs).unwrap();
    let mut script = String::from("set -u\n");
    for (i, step) in steps.iter().enumerate() {
        let out = outputs.join(i.to_string());
        script.push_str(&format!(
            "{{ {}\n}} > '{}' 2>&1 < /dev/null; echo $? > '{}.rc'\n",
            step.command,
            out.display(),
            out.display()
        ));
    }
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_plinth")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // Its own process group, so that what a page starts in the background (`… &`) is stopped
    // with it, by that group's id, whatever the page did.
    let mut shell = Command::new("timeout");
    shell
        .args(["900", "bash", "-c", &script])
        .process_group(0)
        .current_dir(&checkout)
        .envs(go_caches())
        .env("HOME", home.path())
        .env("PATH", path)
        .env("KUBECACHEDIR", home.path().join("kube-cache"))
        // As a reader has it after "Getting started" (which sets it itself, as shown there).
        .env("KUBECONFIG", share.join("plinth/kubeconfig"))
        .env_remove("KUBECTL_EXTERNAL_DIFF")
        .env_remove("PLINTH_DATA_DIR");
    let mut shell = shell.spawn().expect("run bash");
    let status = shell.wait().expect("wait for bash");
    let _ = Command::new("kill")
        .args(["-TERM", "--", &format!("-{}", shell.id())])
        .stderr(std::process::Stdio::null())
        .status();
    assert!(
        status.success(),
        "{}: the session's shell failed: {status}",
        page.display()
    );
    let mut failures = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let out = outputs.join(i.to_string());
        let actual = std::fs::read_to_string(&out).unwrap_or_default();
        let rc: i32 = std::fs::read_to_string(format!("{}.rc", out.display()))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(-1);
        let lines: Vec<String> = actual.lines().map(str::to_owned).collect();
        let must_fail = shows_error(&step.expected);
        let exit_ok = if must_fail { rc != 0 } else { rc == 0 };
        if !exit_ok || !output_matches(&step.expected, &lines) {
            failures.push(format!(
                "{}: `$ {}` exited {rc} (expected {}); shown:\n{}\ngot:\n{actual}",
                page.display(),
                step.command,
                if must_fail { "a failure" } else { "success" },
                step.expected.join("\n")
            ));
        }
    }
    failures
}

fn pages(dir: &Path, found: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            pages(&path, found);
        } else if path.extension().is_some_and(|e| e == "md") {
            found.push(path);
        }
    }
}

#[test]
fn the_books_console_sessions_run_as_shown() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/book/src");
    let mut all = Vec::new();
    pages(&src, &mut all);
    let mut ran = 0;
    let mut failures = Vec::new();
    for page in all {
        let markdown = std::fs::read_to_string(&page).unwrap();
        let steps = sessions(&markdown);
        if steps.is_empty() {
            continue;
        }
        let plinth = Plinth::start_with(
            Backend::Embedded,
            &["--node-name", "book", "--pod-network=namespaces"],
        );
        failures.extend(run_page(&page, &steps, &plinth));
        ran += steps.len();
    }
    assert!(
        ran >= 10,
        "the book shows at least the getting-started session ({ran} commands)"
    );
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn sessions_are_read_as_a_reader_types_them() {
    let page = "text\n```console\n$ echo a \\\n  b\na b\n$ cat <<'EOF'\nx\nEOF\nx\n$ kubectl get x\nError from server (NotFound): x\n```\n```sh\n$ not a session\n```\n";
    let steps = sessions(page);
    assert_eq!(steps.len(), 3, "{steps:?}");
    assert_eq!(steps[0].command, "echo a \\\n  b");
    assert_eq!(steps[0].expected, ["a b"]);
    assert_eq!(steps[1].command, "cat <<'EOF'\nx\nEOF");
    assert_eq!(steps[1].expected, ["x"]);
    assert!(shows_error(&steps[2].expected));
    assert!(!shows_error(&steps[0].expected));
    let lines = |s: &str| s.lines().map(str::to_owned).collect::<Vec<_>>();
    assert!(output_matches(&lines("a\n...\nz"), &lines("a\nb\nc\nz")));
    assert!(output_matches(&lines("a\n...\nz"), &lines("a\nz")));
    assert!(!output_matches(&lines("a\nz"), &lines("a\nb\nz")));
    assert!(line_matches("default   Active   ...", "default Active 5s"));
    assert!(line_matches(
        "pod/...   1/1 Running",
        "pod/web-1  1/1   Running"
    ));
    assert!(!line_matches(
        "default Active ...",
        "default Terminating 5s"
    ));
    assert!(!line_matches("a", "b"));
}
