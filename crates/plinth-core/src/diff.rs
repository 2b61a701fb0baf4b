//! Line diffs: the unified diff (`diff -u`) between two texts, from their longest common
//! subsequence of lines.

/// The largest comparison table (lines × lines) a diff builds: 16 MB.
const MAX_TABLE: usize = 4 << 20;

/// One line of a comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Line<'a> {
    Same(&'a str),
    Gone(&'a str),
    New(&'a str),
}

/// The unified diff turning `old` into `new`, with `context` lines around each change and
/// `---`/`+++` headers naming them; empty when they are equal.
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str, context: usize) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (old.lines().collect(), new.lines().collect());
    let lines = compare(&a, &b);
    if lines.iter().all(|l| matches!(l, Line::Same(_))) {
        return String::new();
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    // Positions (in `lines`) of changes, grouped into hunks whose context overlaps.
    let changed: Vec<usize> = (0..lines.len())
        .filter(|&i| !matches!(lines[i], Line::Same(_)))
        .collect();
    let mut hunks: Vec<(usize, usize)> = Vec::new();
    for &i in &changed {
        let (start, end) = (
            i.saturating_sub(context),
            (i + context + 1).min(lines.len()),
        );
        match hunks.last_mut() {
            Some((_, last_end)) if start <= *last_end => *last_end = end,
            _ => hunks.push((start, end)),
        }
    }
    for (start, end) in hunks {
        // Line numbers of the hunk's first line in each text (1-based).
        let before = &lines[..start];
        let old_at = before.iter().filter(|l| !matches!(l, Line::New(_))).count();
        let new_at = before
            .iter()
            .filter(|l| !matches!(l, Line::Gone(_)))
            .count();
        let hunk = &lines[start..end];
        let old_len = hunk.iter().filter(|l| !matches!(l, Line::New(_))).count();
        let new_len = hunk.iter().filter(|l| !matches!(l, Line::Gone(_))).count();
        let range = |at: usize, len: usize| {
            if len == 0 {
                format!("{at},0")
            } else {
                format!("{},{len}", at + 1)
            }
        };
        out.push_str(&format!(
            "@@ -{} +{} @@\n",
            range(old_at, old_len),
            range(new_at, new_len)
        ));
        for line in hunk {
            let (mark, text) = match line {
                Line::Same(t) => (' ', t),
                Line::Gone(t) => ('-', t),
                Line::New(t) => ('+', t),
            };
            out.push(mark);
            out.push_str(text);
            out.push('\n');
        }
    }
    out
}

/// The lines of `a` and `b` in order, marked kept, removed or added, by their longest common
/// subsequence (common head and tail first, so that small edits of long texts stay cheap).
fn compare<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Line<'a>> {
    let head = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (mid_a, mid_b) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    let mut out: Vec<Line<'a>> = a[..head].iter().map(|l| Line::Same(l)).collect();
    let (n, m) = (mid_a.len(), mid_b.len());
    if n.saturating_mul(m) > MAX_TABLE {
        // Too large to compare line by line: the middle, replaced whole.
        out.extend(mid_a.iter().map(|l| Line::Gone(l)));
        out.extend(mid_b.iter().map(|l| Line::New(l)));
        out.extend(a[a.len() - tail..].iter().map(|l| Line::Same(l)));
        return out;
    }
    // lcs[i][j]: the longest common subsequence of mid_a[i..] and mid_b[j..].
    let mut lcs = vec![vec![0u32; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if mid_a[i] == mid_b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && mid_a[i] == mid_b[j] {
            out.push(Line::Same(mid_a[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            // Removals before additions, as `diff -u` shows a changed line.
            out.push(Line::Gone(mid_a[i]));
            i += 1;
        } else {
            out.push(Line::New(mid_b[j]));
            j += 1;
        }
    }
    out.extend(a[a.len() - tail..].iter().map(|l| Line::Same(l)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_have_no_diff() {
        assert_eq!(unified("a\nb\n", "a\nb\n", "x", "y", 3), "");
    }

    #[test]
    fn a_changed_line_is_a_hunk_with_context() {
        let old = "1\n2\n3\n4\n5\n6\n7\n8\n9\n";
        let new = "1\n2\n3\n4\nfive\n6\n7\n8\n9\n";
        assert_eq!(
            unified(old, new, "a/x", "b/x", 2),
            "--- a/x\n+++ b/x\n@@ -3,5 +3,5 @@\n 3\n 4\n-5\n+five\n 6\n 7\n"
        );
    }

    #[test]
    fn additions_and_removals_at_the_ends() {
        assert_eq!(
            unified("", "a\nb\n", "old", "new", 3),
            "--- old\n+++ new\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
        assert_eq!(
            unified("a\nb\nc\n", "b\nc\nd\n", "old", "new", 1),
            "--- old\n+++ new\n@@ -1,3 +1,3 @@\n-a\n b\n c\n+d\n"
        );
    }

    #[test]
    fn far_apart_changes_make_separate_hunks() {
        let old: String = (1..=20).map(|i| format!("{i}\n")).collect();
        let new: String = (1..=20)
            .map(|i| match i {
                2 => "two\n".to_owned(),
                19 => "nineteen\n".to_owned(),
                i => format!("{i}\n"),
            })
            .collect();
        let diff = unified(&old, &new, "o", "n", 1);
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
    }
}
