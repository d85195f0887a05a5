//! Compiles `proto/sweep.proto` and `proto/replication.proto` with protox (pure Rust), so building sweep needs no `protoc` binary.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sweep.proto");
    println!("cargo:rerun-if-changed=proto/replication.proto");
    let fds = protox::compile(["proto/sweep.proto", "proto/replication.proto"], ["proto"])?;
    // The descriptors themselves, for server reflection: `grpcurl` then needs no copy of the .proto.
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("sweep_descriptor.bin"),
        prost::Message::encode_to_vec(&fds),
    )?;
    tonic_prost_build::configure()
        // Shared buffers: a report batch kept for a retry is cloned by reference count.
        .bytes(".sweep.v1.EncodedCompleteRequest.reports")
        .compile_fds(fds)?;
    Ok(())
}
