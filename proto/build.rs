//! Compiles `proto/sweep.proto` with protox (pure Rust), so building sweep needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sweep.proto");
    let fds = protox::compile(["proto/sweep.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
