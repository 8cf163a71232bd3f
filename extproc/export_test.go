package extproc

// DuplexChunk is duplexChunk, for the external tests.
const DuplexChunk = duplexChunk
