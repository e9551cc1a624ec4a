// The dashboard's web assets (runtime/service/dashboard/web/), built into the
// binary by a genrule (embed_assets.py): no file is read at run time.
//
//   if (const Asset* a = FindAsset("app.js")) Serve(a->content_type, a->data, a->size);
#pragma once

#include <cstddef>
#include <string_view>

namespace loom::runtime::service::dashboard {

struct Asset {
  const char* path;          // relative to web/, e.g. "app.js"
  const char* content_type;  // from the extension, e.g. "text/javascript; charset=utf-8"
  const unsigned char* data;
  size_t size;
};

// The table, sorted by path (generated).
const Asset* Assets();
int NumAssets();

// The asset at `path` (relative to web/), or nullptr.
const Asset* FindAsset(std::string_view path);

}  // namespace loom::runtime::service::dashboard
