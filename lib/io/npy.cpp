// NumPy .npy arrays: 2-D, C order, little-endian float32 or float16 (converted to float32).
// Header versions 1.0 (u16 header length) and 2.0/3.0 (u32).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <istream>
#include <sstream>

#include "core/error.h"
#include "core/resources.h"
#include "io/file_util.h"
#include "io/io.h"

namespace xmc::io {
namespace {

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal half -> normal float
      int e = -1;
      uint32_t m = man;
      do {
        ++e;
        m <<= 1;
      } while ((m & 0x400u) == 0);
      bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | man << 13;
  } else {
    bits = sign | (exp + 127 - 15) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// Value of key `key` in the header dict, as its source text: a quoted string, a
// parenthesised tuple, True or False. (A plain scan: std::regex recurses per character
// and can exhaust the stack on a long hostile header.)
std::string dict_value(const std::string& header, const std::string& key, const std::string& name) {
  const std::string quoted = "'" + key + "'";
  for (size_t at = header.find(quoted); at != std::string::npos; at = header.find(quoted, at + 1)) {
    size_t p = header.find_first_not_of(" \t", at + quoted.size());
    if (p == std::string::npos || header[p] != ':') continue;
    p = header.find_first_not_of(" \t", p + 1);
    if (p == std::string::npos) break;
    size_t end = std::string::npos;
    if (header[p] == '\'') {
      end = header.find('\'', p + 1);
    } else if (header[p] == '(') {
      end = header.find(')', p + 1);
    } else {
      for (const char* word : {"True", "False"})
        if (header.compare(p, std::strlen(word), word) == 0) return word;
    }
    if (end != std::string::npos) return header.substr(p, end + 1 - p);
  }
  throw_input(
      "{}: npy header has no '{}' entry: expected a dict with 'descr', "
      "'fortran_order' and 'shape', found {}",
      name, key, printable(header));
}

// Bytes from the read position to the end of a seekable stream (the read position is
// kept), or -1 when the stream cannot seek.
int64_t remaining_bytes(std::istream& in) {
  const std::streampos here = in.tellg();
  if (here < 0) return -1;
  in.seekg(0, std::ios::end);
  const std::streampos end = in.tellg();  // -1 when the seek failed
  in.clear();
  in.seekg(here);
  return end < 0 ? -1 : static_cast<int64_t>(end - here);
}

}  // namespace

void check_finite(const DenseMatrix& m, const std::string& name) {
  const auto& v = m.values;
  const auto first = std::find_if(v.begin(), v.end(), [](float x) { return !std::isfinite(x); });
  if (first == v.end()) return;
  const auto at = static_cast<int64_t>(first - v.begin());
  const auto count = std::count_if(first, v.end(), [](float x) { return !std::isfinite(x); });
  throw_input(
      "{}: value {} at row {}, column {} (0-based) is not finite ({} non-finite values "
      "in all): expected finite features",
      name, *first, at / m.cols, at % m.cols, count);
}

DenseMatrix read_npy(std::istream& in, const std::string& name) {
  char magic[8];
  if (!in.read(magic, 8) || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw_input("{}: not a .npy file: expected the magic string '\\x93NUMPY' at byte 0", name);
  const int major = static_cast<unsigned char>(magic[6]);
  if (major < 1 || major > 3)
    throw_input("{}: unsupported .npy version {}.{}: expected 1.0, 2.0 or 3.0", name, major,
                static_cast<int>(static_cast<unsigned char>(magic[7])));
  // Header length: little-endian, 2 bytes in version 1, 4 after.
  unsigned char b[4] = {0, 0, 0, 0};
  if (!in.read(reinterpret_cast<char*>(b), major == 1 ? 2 : 4))
    throw_input("{}: truncated .npy header", name);
  const uint32_t header_len = b[0] | static_cast<uint32_t>(b[1]) << 8 |
                              static_cast<uint32_t>(b[2]) << 16 | static_cast<uint32_t>(b[3]) << 24;
  if (header_len > (1u << 20))
    throw_input("{}: .npy header length {} is implausible", name, header_len);
  std::string header(header_len, '\0');
  if (!in.read(header.data(), header_len))
    throw_input("{}: truncated .npy header: expected {} header bytes", name, header_len);

  const std::string descr = printable(dict_value(header, "descr", name));
  const bool f32 = descr == "'<f4'" || descr == "'=f4'";
  const bool f16 = descr == "'<f2'" || descr == "'=f2'";
  if (!f32 && !f16)
    throw_input("{}: unsupported dtype {}: expected float32 ('<f4') or float16 ('<f2')", name,
                descr);
  if (dict_value(header, "fortran_order", name) != "False")
    throw_input("{}: array is in Fortran order: expected C order (fortran_order: False)", name);
  const std::string shape_text = dict_value(header, "shape", name);
  const std::string shape = printable(shape_text);
  std::vector<int64_t> dims;
  {
    std::string inner = shape_text.substr(1, shape_text.size() - 2);
    std::stringstream ss(inner);
    std::string item;
    while (std::getline(ss, item, ',')) {
      size_t a = item.find_first_not_of(" \t");
      if (a == std::string::npos) continue;
      try {
        dims.push_back(std::stoll(item.substr(a)));
      } catch (const std::exception&) {
        throw_input("{}: cannot read the shape {}: expected integers", name, shape);
      }
    }
  }
  if (dims.size() != 2)
    throw_input("{}: array has rank {} (shape {}): expected a 2-D array [N×D]", name, dims.size(),
                shape);
  if (dims[0] < 0 || dims[1] < 0) throw_input("{}: negative shape {}", name, shape);

  // The shape is checked against the bytes that follow the header before anything is
  // allocated from it: a corrupted or hostile header cannot ask for terabytes.
  const int64_t item = f32 ? 4 : 2;
  int64_t n = 0, need = 0;
  if (__builtin_mul_overflow(dims[0], dims[1], &n) || __builtin_mul_overflow(n, item, &need))
    throw_input("{}: shape {} is too large: {} × {} values overflow a 64-bit size", name, shape,
                dims[0], dims[1]);
  const int64_t have = remaining_bytes(in);
  const char* type = f32 ? "float32" : "float16";
  if (have >= 0 && have < need)
    throw_input(
        "{}: truncated data: expected {} {} values for shape {} ({} bytes), found {} "
        "bytes after the header",
        name, n, type, shape, need, have);
  if (have > need)
    throw_input(
        "{}: {} bytes after the header, expected {} ({} {} values for shape {}): "
        "trailing data or a wrong shape",
        name, have, need, n, type, shape);
  if (have < 0)
    check_memory_plan(static_cast<double>(need) * (f32 ? 1 : 3), name, "a wrong shape?");

  DenseMatrix m(dims[0], dims[1]);
  std::vector<uint16_t> h(f16 ? static_cast<size_t>(n) : 0);  // float16 values, converted below
  char* data = f32 ? reinterpret_cast<char*>(m.values.data()) : reinterpret_cast<char*>(h.data());
  if (!in.read(data, static_cast<std::streamsize>(need)))
    throw_input("{}: truncated data: expected {} {} values for shape {}, found {}", name, n, type,
                shape, in.gcount() / item);
  for (size_t i = 0; i < h.size(); ++i) m.values[i] = half_to_float(h[i]);
  check_finite(m, name);
  return m;
}

DenseMatrix read_npy(const std::string& path) {
  file_stamp(path);  // missing file -> InputError naming it
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input("cannot open '{}'", path);
  return read_npy(in, path);
}

void write_npy(const std::string& path, const DenseMatrix& m) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(m.rows) + ", " + std::to_string(m.cols) + "), }";
  // Total header (magic 6 + version 2 + length 2 + dict + '\n') is a multiple of 64.
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  AtomicFile f(path);
  // Magic, version 1.0, the header length (u16, little-endian), the header.
  std::string pre("\x93NUMPY\x01\x00", 8);
  pre += {static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  f.write(pre + header);
  f.write(m.values.data(), m.values.size() * sizeof(float));
  f.commit();
}

}  // namespace xmc::io
