# Red Lite, CPU build, on Debian 12 (docs/INSTALL.md):
#   docker build -t redlite .
#   docker run --rm -v "$PWD/models:/models" redlite generate -m /models/default.gguf -p "def fib(n):"
#   docker run --rm -p 8080:8080 -v "$PWD/models:/models" redlite serve -m /models/default.gguf --host 0.0.0.0
# Two stages: the build (compiler, headers) and a slim run-time image with the installed tree.
FROM debian:12 AS build
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      build-essential pkg-config python3 libutf8proc-dev libcjson-dev libmicrohttpd-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY include include
COPY src src
COPY tests/c tests/c
COPY tools tools
COPY models models
RUN make -j"$(nproc)" build/redlite lib models/default.gguf && make install PREFIX=/usr/local DESTDIR=/out \
    && install -D -m 644 models/default.gguf /out/usr/local/share/redlite/default.gguf

FROM debian:12
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends \
      libutf8proc2 libcjson1 libmicrohttpd12 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/ /
RUN ldconfig
EXPOSE 8080
ENTRYPOINT ["redlite"]
CMD ["--help"]
