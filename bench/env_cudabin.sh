# bench/env_cudabin.sh — sourced by the bench scripts that build or run on the GPU machine: use the
# carried .cudabin/{include,lib} (shared libraries + headers the GPU image lacks: cjson, utf8proc,
# microhttpd), found in the current directory or one level up (a stage folder inside the shipped
# repository root). Exports C_INCLUDE_PATH, LIBRARY_PATH and prepends LD_LIBRARY_PATH; no-op without it.
for _d in .cudabin ../.cudabin; do
    if [ -d "$_d" ]; then
        _d=$(cd "$_d" && pwd)
        export C_INCLUDE_PATH=$_d/include LIBRARY_PATH=$_d/lib LD_LIBRARY_PATH=$_d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        break
    fi
done
unset _d
