//! What the kernel says about itself: the `kernel_info_reply` and the kernelspec.
//!
//! Conventions (DESIGN.md): kernelspec name `jaxrepl`, language `rust`, file extension
//! `.rs`, `interrupt_mode: message` (without it jupyter_client interrupts with SIGINT).

use jupyter_protocol::{CodeMirrorMode, HelpLink, KernelInfoReply, LanguageInfo, ReplyStatus};
use std::path::{Path, PathBuf};

/// The kernelspec's directory name, which notebooks name in `metadata.kernelspec.name`.
pub const KERNEL_NAME: &str = "jaxrepl";

/// The name front ends show.
pub const DISPLAY_NAME: &str = "jaxrepl (Rust)";

/// Variables the evaluation child needs to build the engine against Debian's MLIR/LLVM 22
/// (the same values as the workspace's `.cargo/config.toml`, which evcxr does not read).
pub const MLIR_ENV: [(&str, &str); 4] = [
    ("MLIR_SYS_220_PREFIX", "/usr/lib/llvm-22"),
    ("TABLEGEN_220_PREFIX", "/usr/lib/llvm-22"),
    ("LIBCLANG_PATH", "/usr/lib/llvm-22/lib"),
    ("MLIR_SYS_LINK_SHARED", "1"),
];

/// The `kernel_info_reply` content.
pub fn kernel_info() -> KernelInfoReply {
    KernelInfoReply {
        status: ReplyStatus::Ok,
        protocol_version: "5.3".into(),
        implementation: "jaxrepl-kernel".into(),
        implementation_version: env!("CARGO_PKG_VERSION").into(),
        language_info: LanguageInfo {
            name: "rust".into(),
            version: rustc_version(),
            mimetype: Some("text/rust".into()),
            file_extension: Some(".rs".into()),
            pygments_lexer: Some("rust".into()),
            codemirror_mode: Some(CodeMirrorMode::Simple("rust".into())),
            nbconvert_exporter: None,
        },
        banner: format!(
            "jaxrepl {} — JAX's ideas in Rust. Cells are Rust, evaluated by evcxr; %help lists the magics.",
            env!("CARGO_PKG_VERSION")
        ),
        help_links: vec![HelpLink {
            text: "The Rust Programming Language".into(),
            url: "https://doc.rust-lang.org/book/".into(),
        }],
        debugger: false,
        error: None,
    }
}

/// The Rust version the workspace requires (`rust-version`), which cells may rely on.
fn rustc_version() -> String {
    env!("CARGO_PKG_RUST_VERSION").to_string()
}

/// The `kernel.json` content for a kernel binary at `exe`; with `engine`, the kernel's
/// sessions load that engine crate (`JAXREPL_ENGINE_DIR` in the spec's `env`), wherever
/// Jupyter is started from.
pub fn kernelspec_json(exe: &Path, engine: Option<&Path>) -> serde_json::Value {
    let mut env: serde_json::Map<String, serde_json::Value> =
        MLIR_ENV.iter().map(|(k, v)| (k.to_string(), serde_json::Value::from(*v))).collect();
    if let Some(dir) = engine {
        env.insert("JAXREPL_ENGINE_DIR".into(), serde_json::Value::from(dir.to_string_lossy().into_owned()));
    }
    serde_json::json!({
        "argv": [exe, "--connection-file", "{connection_file}"],
        "display_name": DISPLAY_NAME,
        "language": "rust",
        "interrupt_mode": "message",
        "env": env,
        "metadata": {"debugger": false},
    })
}

/// Writes `DIR/kernels/jaxrepl/kernel.json` pointing at this very binary (by absolute
/// path) and at the engine crate a session started here would load (`JAXREPL_ENGINE_DIR`
/// or the search `SessionOptions::from_env` makes), and returns the file's path. `DIR` is
/// a Jupyter data directory, such as an entry of `JUPYTER_PATH`. Errors: the directory or
/// file cannot be written.
pub fn install(data_dir: &Path) -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?.canonicalize()?;
    let engine = jaxrepl::SessionOptions::from_env().engine_path;
    let engine = engine.join("Cargo.toml").is_file().then_some(engine);
    let dir = data_dir.join("kernels").join(KERNEL_NAME);
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("kernel.json");
    std::fs::write(&file, serde_json::to_string_pretty(&kernelspec_json(&exe, engine.as_deref()))? + "\n")?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernelspec_has_the_agreed_fields() {
        let spec = kernelspec_json(Path::new("/opt/bin/jaxrepl-kernel"), None);
        assert_eq!(spec["argv"], serde_json::json!(["/opt/bin/jaxrepl-kernel", "--connection-file", "{connection_file}"]));
        assert_eq!(spec["language"], "rust");
        assert_eq!(spec["interrupt_mode"], "message");
        assert_eq!(spec["display_name"], "jaxrepl (Rust)");
        assert_eq!(spec["env"]["MLIR_SYS_220_PREFIX"], "/usr/lib/llvm-22");
        assert_eq!(spec["env"]["MLIR_SYS_LINK_SHARED"], "1");
        assert!(spec["env"].get("JAXREPL_ENGINE_DIR").is_none());
        let spec = kernelspec_json(Path::new("/opt/bin/jaxrepl-kernel"), Some(Path::new("/src/jaxrepl/engine")));
        assert_eq!(spec["env"]["JAXREPL_ENGINE_DIR"], "/src/jaxrepl/engine");
    }

    #[test]
    fn language_info_is_rust() {
        let info = serde_json::to_value(kernel_info()).unwrap();
        let li = &info["language_info"];
        assert_eq!(li["name"], "rust");
        assert_eq!(li["file_extension"], ".rs");
        assert_eq!(li["mimetype"], "text/rust");
        assert_eq!(li["pygments_lexer"], "rust");
        assert_eq!(info["status"], "ok");
    }
}
