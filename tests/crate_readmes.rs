//! Keeps each publishable crate's README.md (its page on crates.io) true to the crate.
//!
//! For every `crates/*` package without `publish = false`:
//!
//! * its Cargo.toml says `readme = "README.md"` and the file is there;
//! * the README's example is one of the crate's doc examples, so it compiles and runs as a doctest:
//!   a `<!-- doc-example: <file under the crate> -->` line, then a Rust code block whose lines are
//!   that doc example's lines as rustdoc compiles them (its hidden `# ` lines shown);
//! * it names `ARCHITECTURE.md` (by name: a relative link would break on crates.io, and the
//!   repository has no public URL), and holds no relative Markdown link.
//!
//! A README whose example drifts from the doc example fails here with both texts.

use std::fs;
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- doc-example: ";

/// The `crates/*` folders whose package is published (no `publish = false`), sorted.
fn publishable_crates() -> Vec<PathBuf> {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates");
    let mut out: Vec<PathBuf> = fs::read_dir(&crates)
        .expect("crates/ is readable")
        .map(|e| e.expect("a crates/ entry").path())
        .filter(|dir| {
            fs::read_to_string(dir.join("Cargo.toml"))
                .is_ok_and(|toml| !toml.lines().any(|l| l.trim() == "publish = false"))
        })
        .collect();
    out.sort();
    out
}

/// The Rust code blocks of a source file's doc comments (`//!` and `///`), each as the lines
/// rustdoc compiles: a hidden `# ` line without its `# `, a lone `#` as an empty line.
fn doc_examples(source: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut block: Option<Vec<String>> = None;
    let mut inside = false;
    for line in source.lines() {
        let trimmed = line.trim_start();
        let Some(text) = trimmed.strip_prefix("//!").or_else(|| trimmed.strip_prefix("///")) else {
            (block, inside) = (None, false);
            continue;
        };
        let text = text.strip_prefix(' ').unwrap_or(text);
        if let Some(info) = text.strip_prefix("```") {
            if inside {
                out.extend(block.take());
                inside = false;
            } else {
                inside = true;
                let rust = matches!(info, "" | "rust" | "no_run" | "should_panic");
                block = rust.then(Vec::new);
            }
            continue;
        }
        if let Some(lines) = block.as_mut() {
            let shown = if text == "#" { "" } else { text.strip_prefix("# ").unwrap_or(text) };
            lines.push(shown.to_owned());
        }
    }
    out
}

/// The file a README's marker names and the lines of the Rust block that follows it.
fn readme_example(readme: &str) -> Result<(String, Vec<String>), String> {
    let start = readme.find(MARKER).ok_or(format!("no `{MARKER}<file> -->` line before the example"))?;
    let rest = &readme[start + MARKER.len()..];
    let (file, rest) = rest.split_once(" -->").ok_or("the doc-example marker is not closed with ` -->`")?;
    let mut lines = rest.lines().skip_while(|l| l.trim().is_empty());
    if lines.next() != Some("```rust") {
        return Err("the doc-example marker is not followed by a ```rust block".into());
    }
    let block: Vec<String> = lines.take_while(|l| *l != "```").map(str::to_owned).collect();
    Ok((file.to_owned(), block))
}

fn check(dir: &Path) -> Result<(), String> {
    let toml = fs::read_to_string(dir.join("Cargo.toml")).map_err(|e| format!("Cargo.toml: {e}"))?;
    if !toml.lines().any(|l| l.trim() == r#"readme = "README.md""#) {
        return Err(r#"Cargo.toml does not say readme = "README.md""#.into());
    }
    let readme = fs::read_to_string(dir.join("README.md")).map_err(|e| format!("README.md: {e}"))?;
    if !readme.contains("ARCHITECTURE.md") {
        return Err("README.md does not point at ARCHITECTURE.md".into());
    }
    if let Some(link) = readme.split("](").skip(1).find(|l| !l.starts_with("https://")) {
        let target: String = link.chars().take_while(|&c| c != ')').collect();
        return Err(format!(
            "README.md links to `{target}`, which breaks on crates.io: name the file instead"
        ));
    }
    let (file, example) = readme_example(&readme)?;
    let source =
        fs::read_to_string(dir.join(&file)).map_err(|e| format!("{file} (the doc-example marker): {e}"))?;
    let examples = doc_examples(&source);
    if examples.contains(&example) {
        return Ok(());
    }
    let theirs: Vec<String> = examples.iter().map(|e| e.join("\n")).collect();
    Err(format!(
        "README.md's example is none of {file}'s {} doc examples; copy one (hidden `# ` lines shown).\n\
         README.md:\n{}\n\n{file}'s doc examples:\n{}",
        examples.len(),
        example.join("\n"),
        theirs.join("\n----\n")
    ))
}

#[test]
fn each_publishable_crate_has_a_readme_whose_example_is_a_doc_example() {
    let crates = publishable_crates();
    assert!(crates.len() >= 5, "expected the five publishable crates, found {crates:?}");
    let failures: Vec<String> =
        crates.iter().filter_map(|dir| check(dir).err().map(|e| format!("{}: {e}", dir.display()))).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn doc_examples_are_read_as_rustdoc_compiles_them() {
    let source = "//! Text.\n//!\n//! ```text\n//! not rust\n//! ```\n//! ```\n//! let a = 1;\n//! # let b = a;\n\
                  //! #\n//! ```\nfn f() {}\n/// ```no_run\n/// g();\n/// ```\n";
    assert_eq!(
        doc_examples(source),
        vec![vec!["let a = 1;".to_owned(), "let b = a;".to_owned(), String::new()], vec!["g();".to_owned()]]
    );
}
