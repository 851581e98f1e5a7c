//! The documentation that tests hold to the code: its tables, each after a marker comment
//! (`<!-- name: ... -->`), a header and a separator line; and the links between its pages.

/// The cells of each row of the table after `<!-- {marker}`, trimmed, without the empty cells
/// outside the first and last `|`.
pub fn rows(page: &str, marker: &str) -> Vec<Vec<String>> {
    let table = page
        .split_once(&format!("<!-- {marker}"))
        .unwrap_or_else(|| panic!("no table marked {marker}"))
        .1;
    table
        .lines()
        .skip(3) // the marker's line, the header, the separator
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            cells[1..cells.len() - 1]
                .iter()
                .map(|c| (*c).to_owned())
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as
    /// hyphens, and `-1`, `-2` after repeats.
    fn anchors(page: &str) -> BTreeSet<String> {
        let mut seen = std::collections::HashMap::<String, usize>::new();
        let mut anchors = BTreeSet::new();
        for line in outside_code(page) {
            let Some(heading) = line.strip_prefix('#') else {
                continue;
            };
            let text = heading.trim_start_matches('#');
            if !text.starts_with(' ') {
                continue;
            }
            let slug: String = text
                .trim()
                .to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || matches!(c, '_' | '-' | ' '))
                .map(|c| if c == ' ' { '-' } else { c })
                .collect();
            let count = seen.entry(slug.clone()).or_default();
            anchors.insert(if *count == 0 {
                slug.clone()
            } else {
                format!("{slug}-{count}")
            });
            *count += 1;
        }
        anchors
    }

    /// The lines of a page outside its fenced code blocks.
    fn outside_code(page: &str) -> Vec<&str> {
        let mut fenced = false;
        page.lines()
            .filter(|line| {
                if line.trim_start().starts_with("```") {
                    fenced = !fenced;
                    return false;
                }
                !fenced
            })
            .collect()
    }

    /// Every Markdown link target of a page that is not a URL.
    fn relative_links(page: &str) -> Vec<String> {
        let mut links = Vec::new();
        for line in outside_code(page) {
            let mut rest = line;
            while let Some(at) = rest.find("](") {
                let after = &rest[at + 2..];
                let Some(end) = after.find(')') else { break };
                let target = &after[..end];
                if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
                    links.push(target.to_owned());
                }
                rest = &after[end..];
            }
        }
        links
    }

    #[test]
    fn every_link_between_the_pages_resolves() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut pages: Vec<PathBuf> = vec![root.join("README.md")];
        for folder in ["docs", "bench"] {
            for entry in std::fs::read_dir(root.join(folder)).unwrap() {
                let path = entry.unwrap().path();
                if path.extension().is_some_and(|e| e == "md") {
                    pages.push(path);
                }
            }
        }
        let mut broken = Vec::new();
        for page in &pages {
            let text = std::fs::read_to_string(page).unwrap();
            for link in relative_links(&text) {
                let (file, anchor) = link.split_once('#').unwrap_or((&link, ""));
                let target = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                let name = page.strip_prefix(&root).unwrap().display().to_string();
                if !target.exists() {
                    broken.push(format!("{name}: {link} (no such file)"));
                } else if !anchor.is_empty() && target.extension().is_some_and(|e| e == "md") {
                    let text = std::fs::read_to_string(&target).unwrap();
                    if !anchors(&text).contains(anchor) {
                        broken.push(format!("{name}: {link} (no such heading)"));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    }

    #[test]
    fn anchors_are_githubs() {
        let page = "# Two groups, one Foo\n## `/metrics` and more\n```\n# not a heading\n```\n## Two groups, one Foo\n";
        let anchors = anchors(page);
        assert!(anchors.contains("two-groups-one-foo"), "{anchors:?}");
        assert!(anchors.contains("two-groups-one-foo-1"), "{anchors:?}");
        assert!(anchors.contains("metrics-and-more"), "{anchors:?}");
        assert!(!anchors.contains("not-a-heading"), "{anchors:?}");
    }
}
