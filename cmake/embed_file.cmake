# Embeds one file as a NUL-terminated C byte array:
#   cmake -DIN=<file> -DOUT=<file.c> -DNAME=<symbol> -P embed_file.cmake
# produces `const char <NAME>[]` holding the file's bytes.
file(READ ${IN} hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
file(WRITE ${OUT}.tmp "/* Generated from ${IN} by embed_file.cmake; do not edit. */\nconst char ${NAME}[] = {${bytes}0x00};\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
