//! Keeps the source tree's rooms small and its modules layered.
//!
//! Two rules, checked over every library source file of the workspace (`src/` and `crates/*/src/`):
//!
//! * **No file has more than [`MAX_CODE_LINES`] lines of code**, not counting blank lines, comments
//!   and `#[cfg(test)]` items (a unit-test module may grow with what it tests). This one also holds
//!   for the benches, the examples and the fuzz targets; integration tests are exempt.
//! * **No module imports items from a module that imports it.** An import is any `crate::`,
//!   `super::`, `self::` or child-module path, in a `use` or inline, outside `#[cfg(test)]` and
//!   `#[cfg(doc)]` items, resolved to the module file that defines the item (following re-exports). Imports between a module and its own ancestors or descendants are
//!   the module tree itself (a parent re-exports its children's items; a child names its parent's
//!   types) and are not edges. Every other cycle, of any length, is reported with its path.
//!
//! The checks read the files as text; they know enough Rust for this tree (string and char
//! literals, line and block comments, nested `use` trees), not the whole grammar.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// The most lines of code one source file may hold.
const MAX_CODE_LINES: usize = 1000;

/// A module file: its crate, its module path inside the crate (empty for the root) and its text.
struct ModFile {
    krate: String,
    path: Vec<String>,
    file: PathBuf,
    text: String,
}

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every library source file: the root package's `src/` and each `crates/*/src/`.
fn module_files() -> Vec<ModFile> {
    let root = workspace_root();
    let mut srcs = vec![("netchannels".to_owned(), root.join("src"))];
    let mut crates: Vec<_> = fs::read_dir(root.join("crates"))
        .expect("crates/ is readable")
        .map(|e| e.expect("a crates/ entry").path())
        .filter(|p| p.join("src").is_dir())
        .collect();
    crates.sort();
    for c in crates {
        let name = c.file_name().expect("a crate folder").to_string_lossy().into_owned();
        srcs.push((name, c.join("src")));
    }
    let mut out = Vec::new();
    for (krate, src) in srcs {
        let mut files = Vec::new();
        collect_rs(&src, &mut files);
        files.sort();
        for file in files {
            let rel = file.strip_prefix(&src).expect("under src");
            let mut path: Vec<String> = rel.iter().map(|s| s.to_string_lossy().into_owned()).collect();
            let last = path.pop().expect("a file name");
            let stem = last.trim_end_matches(".rs");
            if !matches!(stem, "lib" | "main" | "mod") {
                path.push(stem.to_owned());
            }
            if path.first().is_some_and(|p| p == "bin") {
                continue;
            }
            let text = fs::read_to_string(&file).expect("a readable source file");
            out.push(ModFile { krate: krate.clone(), path, file, text });
        }
    }
    out
}

/// Every source file the line limit applies to: the libraries (less their unit-test files, named
/// `tests.rs` or under a `tests/` folder), the benches, the examples and the fuzz targets.
fn source_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let mut out: Vec<PathBuf> = module_files()
        .into_iter()
        .map(|m| m.file)
        .filter(|f| !f.ends_with("tests.rs") && !f.components().any(|c| c.as_os_str() == "tests"))
        .collect();
    let mut extra = vec![root.join("benches"), root.join("examples"), root.join("fuzz/fuzz_targets")];
    for c in fs::read_dir(root.join("crates")).expect("crates/ is readable") {
        let c = c.expect("a crates/ entry").path();
        extra.extend([c.join("benches"), c.join("examples")]);
    }
    for dir in extra.into_iter().filter(|d| d.is_dir()) {
        collect_rs(&dir, &mut out);
    }
    out.sort();
    out
}

fn collect_rs(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).expect("a readable source folder") {
        let p = entry.expect("a folder entry").path();
        if p.is_dir() {
            collect_rs(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The text with comments and the contents of string and char literals blanked (newlines kept, so
/// line numbers hold).
fn strip_comments_and_literals(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r' && matches!(b.get(i + 1), Some(b'"' | b'#')) && !prev_is_ident(b, i) {
            // A raw string: r"..." or r#"..."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            while j < b.len() {
                if b[j] == b'"' && b[j + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes {
                    j += 1 + hashes;
                    break;
                }
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j;
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if i < b.len() && b[i] == b'\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == b'\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a): only literals close with '.
            let close = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                None
            };
            match close {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            // Copy one whole UTF-8 character.
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

fn prev_is_ident(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// The stripped text with every `#[cfg(test)]` item, and every `#[cfg(doc)]` item (imports for doc
/// links only), blanked out (newlines kept).
fn without_test_items(code: &str) -> String {
    let lines: Vec<&str> = code.split('\n').collect();
    let mut keep = vec![true; lines.len()];
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let attr =
            ["#[cfg(test)]", "#[cfg(all(test", "#[cfg(doc)]"].into_iter().find(|a| line.starts_with(a));
        if let Some(attr) = attr {
            let start = i;
            // The item runs to its `;` (a `mod tests;`) or to the brace that closes its body.
            let mut depth = 0i64;
            let mut opened = false;
            let mut j = i;
            'item: while j < lines.len() {
                let text = if j == start { lines[j].trim_start().trim_start_matches(attr) } else { lines[j] };
                for ch in text.chars() {
                    match ch {
                        '{' => {
                            depth += 1;
                            opened = true;
                        }
                        '}' => depth -= 1,
                        ';' if !opened => break 'item,
                        _ => {}
                    }
                    if opened && depth == 0 {
                        break 'item;
                    }
                }
                j += 1;
            }
            for k in keep.iter_mut().take(j.min(lines.len() - 1) + 1).skip(start) {
                *k = false;
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    lines.iter().zip(&keep).map(|(l, &k)| if k { *l } else { "" }).collect::<Vec<_>>().join("\n")
}

fn code_lines(text: &str) -> usize {
    without_test_items(&strip_comments_and_literals(text)).lines().filter(|l| !l.trim().is_empty()).count()
}

/// Expands one `use` tree (`a::{b, c::{d, e}}`, whitespace removed) into its full paths.
fn expand_use_tree(tree: &str) -> Vec<String> {
    let Some(open) = tree.find('{') else {
        return vec![tree.to_owned()];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (k, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..k]);
                start = k + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.is_empty())
        .flat_map(|p| expand_use_tree(p).into_iter().map(move |s| format!("{prefix}{s}")))
        .collect()
}

/// A path the code names, and whether it is a re-export (`pub use`, of any visibility).
#[derive(Debug, PartialEq)]
struct Named {
    path: String,
    reexport: bool,
}

/// Every `crate::`/`super::`/`self::` path the code names: `use` trees expanded (`a as b` kept as
/// `a@as@b`), plus inline paths.
fn named_paths(code: &str) -> Vec<Named> {
    let mut paths = Vec::new();
    let mut rest = code;
    let mut others = String::with_capacity(code.len());
    // `use` items (possibly `pub use`, possibly spanning lines).
    while let Some(at) = find_word(rest, "use") {
        others.push_str(&rest[..at]);
        let before = rest[..at].trim_end();
        let reexport = before.ends_with("pub")
            || (before.ends_with(')')
                && before.rfind("pub(").is_some_and(|p| before[p..].find(')') == Some(before.len() - p - 1)));
        let after = &rest[at + 3..];
        let end = after.find(';').unwrap_or(after.len());
        let spaced: Vec<&str> = after[..end].split_whitespace().collect();
        let tree = spaced.join(" ").replace(" as ", "@as@").replace(' ', "");
        paths.extend(expand_use_tree(&tree).into_iter().map(|path| Named { path, reexport }));
        rest = &after[end..];
    }
    others.push_str(rest);
    let code = others.as_str();
    // Inline paths such as `crate::pool::Packet::new(..)` or `super::hash::mix(..)`.
    for head in ["crate::", "super::"] {
        let mut from = 0;
        while let Some(p) = code[from..].find(head) {
            let at = from + p;
            from = at + head.len();
            if prev_is_ident(code.as_bytes(), at) || code[..at].ends_with("::") {
                continue;
            }
            let path: String = code[at..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            paths.push(Named { path, reexport: false });
        }
    }
    paths
}

fn find_word(hay: &str, word: &str) -> Option<usize> {
    let b = hay.as_bytes();
    let mut from = 0;
    while let Some(p) = hay[from..].find(word) {
        let at = from + p;
        let end = at + word.len();
        let before_ok = !prev_is_ident(b, at);
        let after_ok = b.get(end).is_some_and(|c| c.is_ascii_whitespace());
        if before_ok && after_ok {
            return Some(at);
        }
        from = end;
    }
    None
}

/// The module a path names, as a path from the crate root, and the segments after it: for
/// `crate::a::b::Item`, the longest known module prefix of `a::b::Item` and `[Item]`. `None` for
/// paths outside the crate (`std::`, other crates). A first segment that names a child module of
/// `from` is relative to `from`, as in a `use child::Item;` in a `mod.rs`.
fn resolve(
    path: &str,
    from: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<(Vec<String>, Vec<String>)> {
    let path = path.split("@as@").next().unwrap_or(path);
    let mut segs: Vec<String> = path.split("::").filter(|s| !s.is_empty()).map(str::to_owned).collect();
    let first = segs.first()?.clone();
    // The module `self` and `super` count from: the file's own module.
    let mut base: Vec<String> = match first.as_str() {
        "crate" | "self" => {
            segs.remove(0);
            if first == "crate" { Vec::new() } else { from.to_vec() }
        }
        "super" => from.to_vec(),
        _ if modules.contains(&[from, std::slice::from_ref(&first)].concat()) => from.to_vec(),
        _ => return None,
    };
    while segs.first().is_some_and(|s| s == "super") {
        base.pop();
        segs.remove(0);
    }
    let mut at = 0;
    while at < segs.len() && segs[at] != "self" && segs[at] != "*" {
        base.push(segs[at].clone());
        if !modules.contains(&base) {
            base.pop();
            break;
        }
        at += 1;
    }
    Some((base, segs[at..].to_vec()))
}

/// The name a `use` path brings into scope: its alias, or its last segment.
fn imported_name(path: &str) -> &str {
    match path.split_once("@as@") {
        Some((_, alias)) => alias,
        None => path.rsplit("::").next().unwrap_or(path),
    }
}

fn is_prefix(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && a == &b[..a.len()]
}

#[test]
fn no_source_file_is_over_the_line_limit() {
    let mut over = Vec::new();
    let mut largest = (0, PathBuf::new());
    let files = source_files();
    assert!(files.len() > 100, "found only {} source files: the walk is broken", files.len());
    for file in files {
        let n = code_lines(&fs::read_to_string(&file).expect("a readable source file"));
        if n > largest.0 {
            largest = (n, file.clone());
        }
        if n > MAX_CODE_LINES {
            over.push(format!("{n:6} {}", file.display()));
        }
    }
    eprintln!("largest file: {} lines of code in {}", largest.0, largest.1.display());
    assert!(
        over.is_empty(),
        "files over {MAX_CODE_LINES} lines of code (blank lines, comments and #[cfg(test)] items aside): \
         split them along their seams\n{}",
        over.join("\n")
    );
}

#[test]
fn no_module_imports_a_module_that_imports_it() {
    let files = module_files();
    let mut by_crate: BTreeMap<&str, Vec<&ModFile>> = BTreeMap::new();
    for f in &files {
        by_crate.entry(f.krate.as_str()).or_default().push(f);
    }
    let mut cycles = Vec::new();
    let mut edge_count = 0;
    for (krate, files) in by_crate {
        let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.path.clone()).collect();
        let named: Vec<(&ModFile, Vec<Named>)> = files
            .iter()
            .map(|&f| (f, named_paths(&without_test_items(&strip_comments_and_literals(&f.text)))))
            .collect();
        // Re-exports: (module, name) -> the module the item really lives in, so that an import
        // through a parent's `pub use child::Item` is an import from `child`.
        let mut reexports: BTreeMap<(Vec<String>, String), Vec<String>> = BTreeMap::new();
        for (f, paths) in &named {
            for n in paths.iter().filter(|n| n.reexport) {
                if let Some((target, rest)) = resolve(&n.path, &f.path, &modules)
                    && !rest.is_empty()
                {
                    reexports.insert((f.path.clone(), imported_name(&n.path).to_owned()), target);
                }
            }
        }
        let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
        for (f, paths) in &named {
            for n in paths {
                let Some((mut target, rest)) = resolve(&n.path, &f.path, &modules) else { continue };
                // Follow re-exports (a few hops at most) to where the item is defined.
                for _ in 0..8 {
                    match rest.first().and_then(|item| reexports.get(&(target.clone(), item.clone()))) {
                        Some(t) if *t != target => target = t.clone(),
                        _ => break,
                    }
                }
                if is_prefix(&target, &f.path) || is_prefix(&f.path, &target) {
                    continue;
                }
                edges.entry(f.path.clone()).or_default().insert(target);
            }
        }
        edge_count += edges.values().map(BTreeSet::len).sum::<usize>();
        for cycle in find_cycles(&edges) {
            let names: Vec<String> =
                cycle.iter().map(|m| if m.is_empty() { "crate".to_owned() } else { m.join("::") }).collect();
            cycles.push(format!("{krate}: {}", names.join(" -> ")));
        }
    }
    assert!(edge_count > 50, "the import scan found only {edge_count} edges: the parser is broken");
    assert!(
        cycles.is_empty(),
        "modules that import from a module that imports them (move the shared item to a leaf both can \
         import):\n{}",
        cycles.join("\n")
    );
}

/// One cycle per strongly connected component with more than one module, as a path that closes.
fn find_cycles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    let nodes: BTreeSet<&Vec<String>> = edges.keys().chain(edges.values().flatten()).collect();
    let mut out = Vec::new();
    let mut seen: BTreeSet<&Vec<String>> = BTreeSet::new();
    for &start in &nodes {
        if seen.contains(start) {
            continue;
        }
        // Breadth-first from `start` back to `start`: the shortest cycle through it, if any.
        let mut prev: BTreeMap<&Vec<String>, &Vec<String>> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start]);
        let mut found = None;
        while let Some(n) = queue.pop_front() {
            for next in edges.get(n).into_iter().flatten() {
                if next == start {
                    found = Some(n);
                    break;
                }
                if !prev.contains_key(next) {
                    prev.insert(next, n);
                    queue.push_back(next);
                }
            }
            if found.is_some() {
                break;
            }
        }
        if let Some(mut n) = found {
            let mut cycle = vec![start.clone()];
            let mut back = vec![n.clone()];
            while n != start {
                n = prev[n];
                if n != start {
                    back.push(n.clone());
                }
            }
            back.reverse();
            cycle.extend(back);
            cycle.push(start.clone());
            seen.extend(cycle.iter().filter_map(|m| nodes.get(m).copied()));
            out.push(cycle);
        }
    }
    out
}

#[test]
fn the_checks_see_what_they_should() {
    // Code lines: comments, blank lines, strings with braces and test modules do not count.
    let text = "// c\n/* a\n b */\nfn a() {\n    let s = \"{ // }\";\n}\n\n#[cfg(test)]\nmod tests {\n    fn t() {}\n}\nfn b() {}\n";
    assert_eq!(code_lines(text), 4);
    let text = "fn a() {}\n#[cfg(all(test, not(loom)))]\nmod tests {\n    use super::*;\n}\n#[cfg(doc)]\nuse crate::x::Y;\n";
    assert_eq!(code_lines(text), 1);
    // Use trees expand; aliases and re-exports are seen; inline paths are seen.
    let paths = named_paths(
        "use crate::{a::{B, c::D as E}, e};\npub(crate) use self::x::Y;\nfn f() { super::g::h(); }\n",
    );
    let got: Vec<(&str, bool)> = paths.iter().map(|n| (n.path.as_str(), n.reexport)).collect();
    assert_eq!(
        got,
        [
            ("crate::a::B", false),
            ("crate::a::c::D@as@E", false),
            ("crate::e", false),
            ("self::x::Y", true),
            ("super::g::h", false)
        ]
    );
    assert_eq!(imported_name("crate::a::c::D@as@E"), "E");
    let modules: BTreeSet<Vec<String>> = [
        vec![],
        vec!["a".into()],
        vec!["a".into(), "c".into()],
        vec!["e".into()],
        vec!["x".into(), "g".into()],
        vec!["x".into(), "y".into(), "z".into()],
    ]
    .into_iter()
    .collect();
    let from = vec!["x".to_owned(), "y".to_owned()];
    let v = |s: &[&str]| s.iter().map(|&x| x.to_owned()).collect::<Vec<String>>();
    assert_eq!(resolve("crate::a::c::D@as@E", &from, &modules), Some((v(&["a", "c"]), v(&["D"]))));
    assert_eq!(resolve("super::g::h", &from, &modules), Some((v(&["x", "g"]), v(&["h"]))));
    assert_eq!(resolve("z::Item", &from, &modules), Some((v(&["x", "y", "z"]), v(&["Item"]))));
    assert_eq!(resolve("std::fmt", &from, &modules), None);
    // A two-module cycle is found; a chain is not a cycle.
    let m = |s: &str| vec![s.to_owned()];
    let mut edges = BTreeMap::new();
    edges.insert(m("a"), BTreeSet::from([m("b")]));
    edges.insert(m("b"), BTreeSet::from([m("c")]));
    assert!(find_cycles(&edges).is_empty());
    edges.insert(m("c"), BTreeSet::from([m("a")]));
    assert_eq!(find_cycles(&edges), vec![vec![m("a"), m("b"), m("c"), m("a")]]);
}
