# A static binary on a distroless base: no shell, no package manager, non-root.
#   docker build -t sample-operator:0.1.0 .
FROM rust:1.95-bookworm AS build
RUN rustup target add x86_64-unknown-linux-musl && apt-get update && apt-get install -y --no-install-recommends musl-tools
WORKDIR /src
COPY . .
RUN cargo build --release --locked --package sample-operator --target x86_64-unknown-linux-musl \
 && cp target/x86_64-unknown-linux-musl/release/sample-operator /sample-operator

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /sample-operator /sample-operator
USER 65532:65532
ENTRYPOINT ["/sample-operator"]
CMD ["run", "--leader-elect"]
